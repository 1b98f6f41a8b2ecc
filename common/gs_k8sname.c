/* gs_k8sname.c — see gs_k8sname.h. */
#include "gs_k8sname.h"

#include <stddef.h>
#include <string.h>

static bool alnum(char c)
{
        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

/* s[0..n) is one label: alnum at both ends, alnum or '-' between. */
static bool label(const char *s, size_t n)
{
        if (n == 0 || !alnum(s[0]) || !alnum(s[n - 1]))
                return false;
        for (size_t i = 1; i + 1 < n; i++)
                if (!alnum(s[i]) && s[i] != '-')
                        return false;
        return true;
}

bool gs_k8s_label_ok(const char *s)
{
        size_t n = strnlen(s, GS_K8S_LABEL_MAX + 1);

        return n <= GS_K8S_LABEL_MAX && label(s, n);
}

bool gs_k8s_subdomain_ok(const char *s)
{
        size_t n = strnlen(s, GS_K8S_SUBDOMAIN_MAX + 1);
        const char *p = s, *end = s + n;

        if (n == 0 || n > GS_K8S_SUBDOMAIN_MAX)
                return false;
        for (;;) {
                const char *dot = memchr(p, '.', (size_t)(end - p));
                const char *stop = dot ? dot : end;
                if (!label(p, (size_t)(stop - p)))
                        return false;
                if (!dot)
                        return true;
                p = dot + 1;
        }
}

bool gs_k8s_uid_ok(const char *s)
{
        size_t n = strnlen(s, GS_K8S_UID_MAX + 1);

        return n > 0 && n <= GS_K8S_UID_MAX && strspn(s, "0123456789abcdefABCDEF-") == n;
}
