/* gs_kubeapi.c — see gs_kubeapi.h. */
#include "gs_kubeapi.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int gs_kubeapi_base_url(const struct gs_config *c, char *buf, size_t cap, char *err, size_t errlen)
{
        const char *host = secure_getenv("KUBERNETES_SERVICE_HOST");
        const char *port = secure_getenv("KUBERNETES_SERVICE_PORT");
        size_t n;

        buf[0] = '\0';
        if (c->api_server[0]) {
                snprintf(buf, cap, "%s", c->api_server);
        } else if (host && *host && port && *port) {
                if (strspn(port, "0123456789") != strlen(port) || strlen(port) > 5 ||
                    strspn(host, "0123456789abcdefABCDEF.:-") != strlen(host)) {
                        snprintf(err, errlen,
                                 "KUBERNETES_SERVICE_HOST/PORT ('%.64s', '%.8s') are not an address and a port",
                                 host, port);
                        return -EINVAL;
                }
                if (strchr(host, ':'))
                        snprintf(buf, cap, "https://[%s]:%s", host, port);
                else
                        snprintf(buf, cap, "https://%s:%s", host, port);
        }
        n = strlen(buf);
        while (n && buf[n - 1] == '/')
                buf[--n] = '\0';
        return 0;
}

int gs_kubeapi_read_token(const char *path, char *buf, size_t cap)
{
        size_t len = 0;
        int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY), r = 0;

        if (fd < 0)
                return gs_neg_errno();
        r = gs_read_all(fd, buf, cap, &len);
        if (r < 0)
                goto out;
        while (len && isspace((unsigned char)buf[len - 1]))
                len--;
        buf[len] = '\0';
        if (len == 0)
                r = -ENODATA;
        for (size_t i = 0; i < len; i++)
                if (buf[i] <= 0x20 || buf[i] >= 0x7f)
                        r = -EINVAL;
out:
        close(fd);
        return r;
}

int gs_kubeapi_req_new(struct gs_kubeapi_req *q, const char *url, const char *token_file,
                       const char *ca_file, const char *content_type, char *err, size_t errlen)
{
        static const char bearer[] = "Authorization: Bearer ";
        int r;

        memset(q, 0, sizeof(*q));
        q->easy = curl_easy_init();
        if (!q->easy) {
                snprintf(err, errlen, "curl_easy_init failed");
                return -ENOMEM;
        }
        if (token_file && token_file[0]) {
                q->auth = malloc(sizeof(bearer) + GS_KUBEAPI_TOKEN_MAX);
                if (!q->auth) {
                        r = -ENOMEM;
                        snprintf(err, errlen, "out of memory");
                        goto fail;
                }
                memcpy(q->auth, bearer, sizeof(bearer));
                r = gs_kubeapi_read_token(token_file, q->auth + sizeof(bearer) - 1,
                                          GS_KUBEAPI_TOKEN_MAX);
                if (r < 0) {
                        snprintf(err, errlen, "cannot read the token %.300s: %s", token_file,
                                 r == -EINVAL ? "not one line of printable characters"
                                 : r == -ENODATA ? "empty" : strerror(-r));
                        goto fail;
                }
                q->hdrs = curl_slist_append(q->hdrs, q->auth);
        }
        q->hdrs = curl_slist_append(q->hdrs, "Accept: application/json");
        if (content_type) {
                char ct[128];
                snprintf(ct, sizeof(ct), "Content-Type: %s", content_type);
                q->hdrs = curl_slist_append(q->hdrs, ct);
        }
        if (!q->hdrs) {
                r = -ENOMEM;
                snprintf(err, errlen, "out of memory");
                goto fail;
        }
        curl_easy_setopt(q->easy, CURLOPT_URL, url);
        curl_easy_setopt(q->easy, CURLOPT_HTTPHEADER, q->hdrs);
        curl_easy_setopt(q->easy, CURLOPT_PROTOCOLS_STR, "http,https");
        curl_easy_setopt(q->easy, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(q->easy, CURLOPT_USERAGENT, "gshare-agent");
        curl_easy_setopt(q->easy, CURLOPT_ERRORBUFFER, q->errbuf);
        if (ca_file && ca_file[0])
                curl_easy_setopt(q->easy, CURLOPT_CAINFO, ca_file);
        return 0;
fail:
        gs_kubeapi_req_free(q);
        return r;
}

void gs_kubeapi_req_free(struct gs_kubeapi_req *q)
{
        if (q->auth) {
                explicit_bzero(q->auth, strlen(q->auth));
                free(q->auth);
        }
        curl_slist_free_all(q->hdrs);
        if (q->easy)
                curl_easy_cleanup(q->easy);
        memset(q, 0, sizeof(*q));
}
