#!/bin/bash
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH CUDA_DEVICE_ORDER=PCI_BUS_ID
mkdir -p /work && ln -sfn $PWD /work/main
tar -C .carry -xJf .carry/bin.tar.xz && mkdir -p target/release && cp .carry/bin/frameloop target/release/frameloop
nvidia-smi -L
.carry/bin/frameloop topology > $OUT/topology.txt 2>&1; head -30 $OUT/topology.txt
FRAMELOOP_TEST_SECOND_GPU=1 FRAMELOOP_LOG=info timeout 80 .carry/bin/gpu_loops --include-ignored --test-threads=1 --nocapture > $OUT/gpu_loops_two_gpus.txt 2>&1; echo "gpu_loops rc=$?"
grep -E "loop cam|test result|panicked|-> GPU|backend cuda" $OUT/gpu_loops_two_gpus.txt | cut -c1-250
