# bench/wakeup.mk — wakeup_bench: requests rung once, 10^6 of them from 4
# processes; stalls over 5 ms and the longest (issue 19).  Its client is
# e2e_wire (test/e2e/e2e.mk).
BENCHES += bench/wakeup_bench.py
