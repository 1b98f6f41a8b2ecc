# test/plugin/: the kubelet stand-in end-to-end test of gshare-device-plugin.
TESTS += test/plugin/plugin-test.sh
