# gpu_orders — a sample of gpu_forward's checks in the emulation's reverse and random thread orders
# seconds: 160
# The emulation runs ~10 rows a second: gpu_forward runs every check of test/lib_gpu.sh in the
# forward order, this group a sample in the reverse and random orders (order_checks), where a
# missing barrier or a read of another thread's unwritten value shows. It runs beside gpu_forward:
# the emulation uses one core.
. test/lib_gpu.sh
order_checks reverse
order_checks random
