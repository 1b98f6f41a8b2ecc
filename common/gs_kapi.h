/* gs_kapi.h — a small client of the Kubernetes API server, shared by the
 * agent (pod watch, Events: agent/services/gs_watch.h, agent/services/gs_event.h) and the DRA
 * plugin (ResourceClaims, ResourceSlices: dra/).
 *
 * libcurl; in-cluster service-account authentication: the bearer token is
 * read afresh for every request (projected tokens rotate), the CA from
 * apiCaFile.  Configuration (gs_config.h): apiServer (default
 * https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT), apiTokenFile,
 * apiCaFile.  The server's reply is untrusted: bounded by the caller. */
#ifndef GS_KAPI_H
#define GS_KAPI_H

#include <limits.h>
#include <stddef.h>

#include <curl/curl.h>

#include "gs_config.h"
#include "gs_util.h"

#define GS_KAPI_TOKEN_MAX (16u << 10)
#define GS_KAPI_TIMEOUT_MS 10000L

struct gs_kapi {
        char base[GS_CONFIG_API_SERVER_MAX]; /* "" when there is no API server */
        char token_file[PATH_MAX];           /* "": no token */
        char ca_file[PATH_MAX];              /* "": the system's CAs */
        const char *user_agent;
};

/* The API server's base URL into buf (no trailing '/'): apiServer, else
 * https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT, else "".
 * 0 or -EINVAL (a bad environment) with err set. */
int gs_kapi_base_url(const struct gs_config *c, char *buf, size_t cap, char *err, size_t errlen) GS_WUR;

/* The bearer token at path, one line of printable ASCII, into buf (cap
 * bytes, NUL-terminated).  0 or a negative errno (-ENODATA: empty;
 * -EINVAL: not printable). */
int gs_kapi_read_token(const char *path, char *buf, size_t cap) GS_WUR;

/* Fills k from c.  k->base is "" when there is no API server.  0 or -EINVAL
 * with err set. */
int gs_kapi_init(struct gs_kapi *k, const struct gs_config *c, const char *user_agent, char *err, size_t errlen) GS_WUR;

/* One request: method ("GET", "POST", "PATCH", "DELETE") on k->base + path
 * with body (NULL: none) of content_type.  Returns 0 when the exchange took
 * place, whatever its HTTP status (*ret_code), with the reply's body in
 * *ret_body (malloc'ed, NUL-terminated, *ret_len bytes; free it) unless it
 * was longer than max_reply (then -EMSGSIZE).  A transport failure: a
 * negative errno with err saying why. */
int gs_kapi_request(const struct gs_kapi *k, const char *method, const char *path, const char *content_type,
                    const char *body, size_t max_reply, long *ret_code, char **ret_body, size_t *ret_len, char *err,
                    size_t errlen) GS_WUR;

/* One request as a libcurl easy handle, for callers that run it
 * themselves (the pod watch streams it); the caller adds the method, body,
 * callbacks and timeouts, runs it and frees it.  errbuf holds libcurl's
 * message. */
struct gs_kapi_req {
        CURL *easy;
        struct curl_slist *hdrs;
        char *auth;
        char errbuf[CURL_ERROR_SIZE];
};

/* url with the token of token_file (none if empty), the CA of ca_file (the
 * system's if empty), Accept: application/json and content_type (if not
 * NULL); http and https only, no signals.  The token is wiped when freed.
 * 0 or a negative errno with err set (nothing to free then). */
int gs_kapi_req_new(struct gs_kapi_req *q, const char *url, const char *token_file, const char *ca_file,
                    const char *content_type, char *err, size_t errlen) GS_WUR;
void gs_kapi_req_free(struct gs_kapi_req *q);

#endif
