#!/usr/bin/env bash
# test/train/setup.sh: what the training recipe needs (Debian 12, as root): Debian's PyTorch for
# its own /usr/bin/python3 (README.md, "A small trained Clover"), OpenBLAS (torch's default reference BLAS
# is about 13x slower here), and the King James Bible with its `bible` reader. Not needed by
# `make test` or CI, which use the committed model and references. A no-op once installed.
set -euo pipefail
if /usr/bin/python3 -c 'import torch, matplotlib' 2> /dev/null && command -v bible > /dev/null &&
    [ -e /usr/lib/x86_64-linux-gnu/openblas-openmp/libblas.so.3 ]; then
    exit 0
fi
apt-get update
apt-get install -y --no-install-recommends python3-torch python3-matplotlib libopenblas0-openmp \
    bible-kjv-text bible-kjv
