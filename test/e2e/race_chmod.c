/* race_chmod.c — LD_PRELOAD into gshare-agent by test_harden.py: plays the
 * attacker who wins the race between the agent's bind() of an allocation's
 * socket and a chmod() by path.  Every chmod/fchmodat of a path ending in
 * "/agent.sock" first replaces that path with a symlink to
 * $GSHARE_TEST_VICTIM, then goes ahead.  An agent that creates its sockets
 * under a umask (no chmod by path) leaves the victim's mode alone.
 * Test code. */
#include <dlfcn.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int chmod(const char *path, mode_t mode);
int fchmodat(int dirfd, const char *path, mode_t mode, int flags);

static void plant(const char *path)
{
        const char *victim = getenv("GSHARE_TEST_VICTIM");
        size_t n = strlen(path), k = strlen("/agent.sock");

        if (victim && n >= k && strcmp(path + n - k, "/agent.sock") == 0) {
                (void)unlink(path);
                (void)symlink(victim, path);
        }
}

int chmod(const char *path, mode_t mode)
{
        int (*real)(const char *, mode_t) = (int (*)(const char *, mode_t))dlsym(RTLD_NEXT, "chmod");

        plant(path);
        return real ? real(path, mode) : -1;
}

int fchmodat(int dirfd, const char *path, mode_t mode, int flags)
{
        int (*real)(int, const char *, mode_t, int) =
                (int (*)(int, const char *, mode_t, int))dlsym(RTLD_NEXT, "fchmodat");

        plant(path);
        return real ? real(dirfd, path, mode, flags) : -1;
}
