# bench/restart.mk — restart_bench: hooked clients across an agent kill -9
# and a SIGTERM (upgrade), each followed by a new agent, on the fake driver
# (issue 18).  Its client, e2e_restart, is built by test/e2e/restart.mk.
BENCHES += bench/restart_bench.py
TEST_DEPS += $(B)/test/e2e/e2e_restart
