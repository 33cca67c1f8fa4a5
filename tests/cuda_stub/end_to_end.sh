#!/bin/sh
# tests/cuda_stub/end_to_end.sh TGC CASE — `tgc run` / `tgc train --backend
# cuda` end to end on the stub of the CUDA libraries (TGC_CUDA_LIB_PATH, set
# by CTest, is its directory; NVRTC is the toolkit's). Kernels are no-ops
# and device memory starts zeroed, so numbers are not checked (the loss
# reads 0): the exit status, that the stub refused no call (no "tgc cuda
# stub:" line), that the run got to its end, and that kernels were launched
# and products run (the stub's summary), and for training that the batch
# went up from page-locked memory (the stub refuses a write of it before
# its upload's sync), and that training ran its steady steps as CUDA graphs
# (captured, then launched: the stub replays what was recorded through
# the same checks); `tgc generate` with the KV cache (its decode steps as
# graphs, device memory as the plans predict) and without. 77: skipped.
tgc=$1
case=$2
dir=${TGC_CUDA_LIB_PATH:?}
if [ ! -e "$dir/libnvrtc.so.13" ] && [ ! -e "$dir/libnvrtc.so.12" ]; then
  echo "skipped: no NVRTC of the CUDA toolkit beside the stub in $dir"
  exit 77
fi
export TGC_STUB_SUMMARY=1
out=$(mktemp)
trap 'rm -f "$out"' EXIT
case $case in
  run) want="loss = 0"
       "$tgc" run examples/gpt.tg --config tiny --backend cuda >"$out" 2>&1 ;;
  run_sm90) want="loss = 0"
       TGC_STUB_ARCH=sm_90 "$tgc" run examples/gpt.tg --config tiny --backend cuda >"$out" 2>&1 ;;
  train_f32) want="step 6/6  loss 0"
       "$tgc" train examples/gpt.tg --config tiny --data copy --backend cuda --steps 6 >"$out" 2>&1 ;;
  train_bf16) want="step 6/6  loss 0"
       "$tgc" train examples/gpt.tg --config tiny --data copy --backend cuda --steps 6 --dtype bf16 >"$out" 2>&1 ;;
  generate) want='{"ids": [0, 0, 0, 0, 0]'  # zeroed logits: greedy picks id 0
       "$tgc" generate examples/gpt.tg --config tiny -D V=256 --backend cuda --prompt ab --max-new-tokens 5 --json \
         --timing >"$out" 2>&1 ;;
  generate_nocache) want='{"ids": [0, 0, 0, 0, 0]'
       "$tgc" generate examples/gpt.tg --config tiny -D V=256 --backend cuda --prompt ab --max-new-tokens 5 --json \
         --no-kv-cache >"$out" 2>&1 ;;
  *) echo "unknown case $case"; exit 2 ;;
esac
rc=$?
cat "$out"
if [ $rc -ne 0 ]; then echo "FAIL: tgc exited $rc"; exit 1; fi
if grep -q "tgc cuda stub:" "$out"; then echo "FAIL: the stub refused a call"; exit 1; fi
if ! grep -qF "$want" "$out"; then echo "FAIL: no '$want' in the output"; exit 1; fi
summary=$(grep "^cuda stub summary:" "$out")
launches=$(echo "$summary" | sed -n 's/.* \([0-9]*\) launches.*/\1/p')
products=$(echo "$summary" | sed -n 's/.* \([0-9]*\) products.*/\1/p')
if [ -z "$launches" ] || [ "$launches" -eq 0 ] || [ -z "$products" ] || [ "$products" -eq 0 ]; then
  echo "FAIL: no launches or no products on the stub ($summary)"; exit 1
fi
pinned=$(echo "$summary" | sed -n 's/.* \([0-9]*\) pinned uploads.*/\1/p')
captures=$(echo "$summary" | sed -n 's/.* \([0-9]*\) captures.*/\1/p')
graphs=$(echo "$summary" | sed -n 's/.* \([0-9]*\) graph launches.*/\1/p')
case $case in  # the trainer's batch goes up from page-locked memory, checked at each sync
  train_*) if [ -z "$pinned" ] || [ "$pinned" -eq 0 ]; then echo "FAIL: no pinned uploads ($summary)"; exit 1; fi
           # steps 2.. of the step and update programs: captured, then launched (one launch a program a step)
           if [ -z "$captures" ] || [ "$captures" -eq 0 ] || [ -z "$graphs" ] || [ "$graphs" -ne 10 ]; then
             echo "FAIL: the steady steps did not run as CUDA graphs ($summary)"; exit 1
           fi ;;
  generate) # the decode program, one position after another at the same addresses: captured, then launched
           if [ -z "$captures" ] || [ "$captures" -eq 0 ] || [ -z "$graphs" ] || [ "$graphs" -eq 0 ]; then
             echo "FAIL: the decode steps did not run as CUDA graphs ($summary)"; exit 1
           fi
           if ! grep -q "^memory: predicted \([0-9]*\) bytes, measured \1 " "$out"; then
             echo "FAIL: generation's device memory: measured is not the plans' prediction"; exit 1
           fi ;;
esac
echo "ok: $case on the stub"
