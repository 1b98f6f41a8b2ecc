# bench/: the agent side of DRA prepare/unprepare (CreateClaimAllocation, release by claim UID).
BENCHES += bench/claim_bench.py
