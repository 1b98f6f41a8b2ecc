#!/usr/bin/env bash
# Runs the kubelet stand-in against gshare-device-plugin.
#   GSHARE_TEST_AGENT=standin (default): the in-process stand-in agent
#   GSHARE_TEST_AGENT=real: $B/gshare-agent (health-flip checks need the stand-in)
set -euo pipefail
: "${B:=build}"
export B GSHARE_TEST_AGENT="${GSHARE_TEST_AGENT:-standin}"
cd "$(dirname "$0")/../.."
exec timeout 120 /usr/bin/python3 test/plugin/kubelet_standin.py
