# test/install: the chart, the manifest and the image as shipped.
#   test_mkimage.sh     the image build never crosses a mount point
#   test_agent_dirs.py  a manual install: the agent makes its directories
#   test_chart.py       the manifest is the chart rendered with its defaults
#   test_install.py     the DaemonSet's containers run on a stand-in node, in
#                       the image's tree (root: mount namespaces and chroot)
# The image tree is built by make image's rule (Debian base by mmdebstrap,
# kept while scripts/image-packages is unchanged); only the plain build runs
# the last two (an ASan-built image would prove nothing more).
TEST_DEPS += $(B)/gshare-agent $(B)/gsharectl $(B)/test/fakecuda/libcuda.so.1
ifeq ($(SANITIZE),)
TEST_DEPS += $(B)/image/rootfs/usr/local/bin/gshare-install-hook $(B)/test/e2e/e2e_cuda
endif
