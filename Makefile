# clover.c — build and test.
#   make          ./clover (CPU)
#   make cuda     ./clover-cuda (CPU + GPU, needs nvcc)
#   make cuda-emu build/clover-emu: clover.cu with clang++ and test/cuda_emu.h, kernels run on the CPU
#   make test     the whole suite (installs llama.cpp, the oracle, on first use: test/setup-llama.sh)
#   make bench    speed vs llama.cpp on real-shape slices of the 35B model (test/bench.sh; minutes)
#   make sanitize the whole suite against ./build/san/clover, built with ASan and UBSan (clang)
#   make fuzz     the libFuzzer harnesses, FUZZ_TIME seconds each (clang, libclang-rt-14-dev)
#   make ptxas    clover.cu for sm_90a with ptxas -v: registers, spills, stack, shared memory and SASS
#                 size per kernel (nvcc; minutes)
#   make costmodel  predicted H200 cost per kernel of a 40-layer Q4_K_M decode step, verify and preview,
#                 from the emulation's counts on 4- and 8-layer real-shape slices (~7 GB; long)
CC      ?= cc
CFLAGS  ?= -O2 -march=native -g
CFLAGS  += -std=c11 -Wall -Wextra -D_GNU_SOURCE
LDLIBS  = -lm -lpthread
NVCC    ?= nvcc
LLAMA   = test/llama/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64
LLAMA_INC = test/llama/src/include
GGML_INC  = test/llama/src/ggml/include
LLAMA_LIBS = -L$(LLAMA) -Wl,-rpath,$(abspath $(LLAMA)) -l:libllama.v0.4.0.so -l:libggml.v0.4.0.so -l:libggml-base.so

clover: clover.c
	$(CC) $(CFLAGS) -o $@ clover.c $(LDLIBS)

build:
	mkdir -p build

build/gen: test/gen.c | build
	$(CC) $(CFLAGS) -o $@ test/gen.c $(LDLIBS)

build/cmp: test/cmp.c | build
	$(CC) $(CFLAGS) -o $@ test/cmp.c $(LDLIBS)

build/ref: test/ref.c test/llama_host.h | build
	$(CC) $(CFLAGS) -I$(LLAMA_INC) -I$(GGML_INC) -o $@ test/ref.c $(LLAMA_LIBS) $(LDLIBS)

# an independent float64 evaluation of the preview pass (links ggml only for its dequantisers)
build/preview_ref: test/preview_ref.c | build
	$(CC) $(CFLAGS) -I$(GGML_INC) -o $@ test/preview_ref.c $(LLAMA_LIBS) $(LDLIBS)

build/unit: test/unit.c clover.c | build
	$(CC) $(CFLAGS) -I$(GGML_INC) -o $@ test/unit.c $(LLAMA_LIBS) $(LDLIBS)

# The same checks with the kernels built for AVX2 without AVX-512: the code paths of CPUs without
# AVX512-VNNI, which build/unit (-march=native) does not compile where the build machine has it.
build/unit-avx2: test/unit.c clover.c | build
	$(CC) $(filter-out -march=%,$(CFLAGS)) -march=x86-64-v3 -I$(GGML_INC) -o $@ test/unit.c $(LLAMA_LIBS) $(LDLIBS)

build/bench: test/bench.c test/llama_host.h clover.c | build
	$(CC) $(CFLAGS) -I$(LLAMA_INC) -I$(GGML_INC) -o $@ test/bench.c $(LLAMA_LIBS) $(LDLIBS)

# clover-cuda: the same program with the GPU side (clover.cu), for sm_90 plus PTX for newer GPUs.
# CUDA_ARCH names the targets: test/gpu.sh builds sm_90a alone (Hopper's own instructions).
# NVCCFLAGS: more nvcc options (test/gpu.sh: -Xptxas -v and -keep, for the cost model).
CUDA_ARCH ?= -arch=sm_90 -gencode arch=compute_90,code=[sm_90,compute_90]
NVCCFLAGS ?=
# The two objects are separate targets so that make -j compiles them at once (nvcc takes minutes).
# cuda: and test/gpu.sh's gpu_bw, so that CI compiles the file only a GPU machine runs
cuda: clover-cuda build/gpu_bw
build/clover-cu.o: clover.cu | build
	$(NVCC) -O2 -std=c++17 -fmad=false $(CUDA_ARCH) $(NVCCFLAGS) -c clover.cu -o $@
build/clover-cuda.o: clover.c | build
	$(CC) $(CFLAGS) -DCLOVER_CUDA -c clover.c -o $@
clover-cuda: build/clover-cu.o build/clover-cuda.o
	$(NVCC) -o $@ build/clover-cuda.o build/clover-cu.o $(LDLIBS)

# gpu_bw: the copy bandwidth test/gpu.sh measures
build/gpu_bw: test/gpu_bw.cu | build
	$(NVCC) -O2 $(CUDA_ARCH) -o $@ test/gpu_bw.cu

# clover-emu: the same two files, clover.cu compiled as plain C++ with the CPU emulation of the CUDA
# runtime (test/cuda_emu.h): each kernel launch runs on the CPU, its threads as fibers, with barrier,
# warp and memory checks (test/run.sh gpu). clang++: GCC ignores the section attribute the header
# puts on static locals in templates (GCC bug 70435). -ffp-contract=off: fused only where written.
CXX_EMU ?= clang++
cuda-emu: build/clover-emu
build/clover-emu: clover.c clover.cu test/cuda_emu.h | build
	$(CXX_EMU) -O2 -g -std=c++17 -ffp-contract=off -Wall -Wextra -DCLOVER_EMU -x c++ -c clover.cu -o build/clover-emu-cu.o
	$(CC) $(CFLAGS) -DCLOVER_CUDA -c clover.c -o build/clover-emu.o
	$(CXX_EMU) -o $@ build/clover-emu.o build/clover-emu-cu.o $(LDLIBS)

# clover-emu-count: clover-emu that also counts the kernels' loads from device memory (clang's
# trace-loads callbacks, scalar code) for CLOVER_EMU_COUNT, the cost model's input (test/costmodel.c)
build/clover-emu-count: build/clover-emu clover.cu test/cuda_emu.h | build
	$(CXX_EMU) -O2 -g -std=c++17 -ffp-contract=off -fno-vectorize -fno-slp-vectorize -fsanitize-coverage=inline-8bit-counters,trace-loads \
		-DCLOVER_EMU -DCLOVER_EMU_COUNT_LOADS -x c++ -c clover.cu -o build/clover-emu-count-cu.o
	$(CXX_EMU) -o $@ build/clover-emu.o build/clover-emu-count-cu.o $(LDLIBS)

build/costmodel: test/costmodel.c | build
	$(CC) $(CFLAGS) -o $@ test/costmodel.c $(LDLIBS)

# ptxas: the sm_90a build's resource report and its cubin's kernel sizes, as costmodel's table
PTXAS_ARCH = -gencode arch=compute_90a,code=sm_90a
ptxas: build/costmodel | build
	mkdir -p build/nvcc-keep
	$(NVCC) -O2 -std=c++17 -fmad=false $(PTXAS_ARCH) -Xptxas -v -keep -keep-dir build/nvcc-keep -c clover.cu -o build/clover-sm90a.o 2> build/ptxas.log || { cat build/ptxas.log; exit 1; }
	c++filt < build/ptxas.log > build/ptxas.txt
	readelf -SW build/nvcc-keep/clover.cubin | sed 's/\.text\./.text. /' | c++filt > build/sass.txt
	build/costmodel --ptxas build/ptxas.txt --sass build/sass.txt

# costmodel: the real-shape q4_k_m slices of test/gpu.sh's benchmark (4 and 8 layers), generated once,
# counted and modelled; with the ptxas table where make ptxas has run
COST_SLICES = build/cost-4.gguf build/cost-8.gguf
build/cost-%.gguf: | build/gen
	build/gen -o $@ --arch clover_moe --mask --shape real --type q4_k_m --layers $*
costmodel: build/clover-emu-count build/costmodel $(COST_SLICES)
	test/costmodel.sh --work build/cost $(if $(wildcard build/ptxas.txt),--ptxas build/ptxas.txt --sass build/sass.txt) \
		--slice 4 build/cost-4.gguf --slice 8 build/cost-8.gguf

# emu_limits: the launch limits test/cuda_emu.h enforces, one launch per case (test/run.sh gpu)
build/emu_limits: test/emu_limits.cu test/cuda_emu.h | build
	$(CXX_EMU) -O1 -g -std=c++17 -Wall -Wextra -Wno-unused-function -Wno-unneeded-internal-declaration -I. -x c++ test/emu_limits.cu -o $@

# Sanitized and fuzzing builds use clang: its libFuzzer, and one compiler for both.
SAN_CC    ?= clang
SANITIZE  = -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
FUZZ_TIME ?= 60

build/san/clover: clover.c | build
	mkdir -p build/san
	$(SAN_CC) -O1 -g -std=c11 -Wall -Wextra -D_GNU_SOURCE $(SANITIZE) -o $@ clover.c $(LDLIBS)

build/fuzz/%: test/%.c test/fuzz.h clover.c | build
	mkdir -p build/fuzz
	$(SAN_CC) -O1 -g -std=c11 -Wall -Wextra -D_GNU_SOURCE -fsanitize=fuzzer $(SANITIZE) -o $@ $< $(LDLIBS)

tools: build/gen build/cmp build/ref build/unit build/unit-avx2 build/preview_ref

# test/setup-llama.sh installs llama.cpp (the oracle) once; later runs are a no-op. The tools and
# build/clover-emu build two at a time. build/clover-emu (the gpu groups) needs clang++; without it
# their checks say they are skipped.
test: clover
	test/setup-llama.sh
	$(MAKE) -j2 tools $$(command -v $(CXX_EMU) > /dev/null 2>&1 && echo cuda-emu build/emu_limits)
	test/run.sh

bench: build/gen build/bench
	test/bench.sh

# The tests against llama.cpp and the error cases, with clover under the sanitizers (the tools that
# link llama.cpp are not sanitized). halt_on_error: the first report ends that run with exit 1 and
# the report on stderr, so the check that ran it fails. detect_leaks=0: clover keeps its model and
# state until exit by design (the fuzz harnesses check for leaks, input by input).
sanitize: build/san/clover tools
	ASAN_OPTIONS=detect_leaks=0:halt_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 CLOVER=build/san/clover test/run.sh

fuzz: build/fuzz/fuzz_gguf build/fuzz/fuzz_tokenizer build/gen
	test/fuzz.sh $(FUZZ_TIME)

.PHONY: test tools cuda cuda-emu bench sanitize fuzz ptxas costmodel

# The tiny trained Clover of test/tiny/ (test/train/, PyTorch from Debian, about 2.7 hours on 2 cores,
# apt-get as root): not part of `make test`, which uses the committed files.
#   make tiny-clover        the whole recipe: corpus, tokenizer, training, GGUF export, references
#   make tiny-clover-refs   only the PyTorch references of test/tiny/refs/ from the committed GGUFs
tiny-clover: clover
	test/train/make.sh

tiny-clover-refs:
	test/train/setup.sh
	/usr/bin/python3 test/train/refs.py test/tiny

.PHONY: tiny-clover tiny-clover-refs
