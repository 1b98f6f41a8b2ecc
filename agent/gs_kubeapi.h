/* gs_kubeapi.h — the agent's client of the Kubernetes API server: where it
 * is, who the agent is (its service account token, the cluster's CA), and
 * one request as a libcurl easy handle carrying both.  Used by the pod
 * watch (gs_watch.h) and the Events (gs_event.h); each runs its requests
 * on a thread of its own.  The token is read afresh for each request
 * (projected tokens rotate) and wiped from memory after it. */
#ifndef GS_KUBEAPI_H
#define GS_KUBEAPI_H

#include <stddef.h>

#include <curl/curl.h>

#include "gs_config.h"
#include "gs_util.h"

#define GS_KUBEAPI_TOKEN_MAX (16u << 10)

/* The API server's base URL into buf (no trailing '/'): apiServer, else
 * https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT, else "" (not
 * in a cluster).  0 or -EINVAL (a bad environment) with err set. */
int gs_kubeapi_base_url(const struct gs_config *c, char *buf, size_t cap, char *err,
                        size_t errlen) GS_WUR;
/* The bearer token at path, one line of printable ASCII (it goes into a
 * header), into buf (cap bytes, NUL-terminated).  0, -ENODATA (empty),
 * -EINVAL, or the read's negative errno. */
int gs_kubeapi_read_token(const char *path, char *buf, size_t cap) GS_WUR;

/* One request; the caller adds the method, body, callbacks and timeouts
 * to easy, runs it, and frees it.  errbuf holds libcurl's message. */
struct gs_kubeapi_req {
        CURL *easy;
        struct curl_slist *hdrs;
        char *auth;
        char errbuf[CURL_ERROR_SIZE];
};

/* url with the token of token_file (none if empty), the CA of ca_file (the
 * system's if empty), Accept: application/json and content_type (if not
 * NULL); http and https only, no signals.  0 or a negative errno with err
 * set (nothing to free then). */
int gs_kubeapi_req_new(struct gs_kubeapi_req *q, const char *url, const char *token_file,
                       const char *ca_file, const char *content_type, char *err,
                       size_t errlen) GS_WUR;
void gs_kubeapi_req_free(struct gs_kubeapi_req *q);

#endif
