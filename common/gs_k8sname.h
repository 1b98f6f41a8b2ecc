/* gs_k8sname.h — the names Kubernetes gives objects, checked wherever one
 * arrives from outside (the control socket, a kubelet, the API server, the
 * checkpoint, a flag) before it goes into a path, a URL or a file.  The
 * rules are Kubernetes' own (k8s.io/apimachinery validation): what it
 * would refuse to create, we refuse to take. */
#ifndef GS_K8SNAME_H
#define GS_K8SNAME_H

#include <stdbool.h>

#define GS_K8S_LABEL_MAX 63      /* a DNS-1123 label */
#define GS_K8S_SUBDOMAIN_MAX 253 /* a DNS-1123 subdomain */
#define GS_K8S_UID_MAX 36        /* a UUID */

/* A DNS-1123 label: 1..63 of [a-z0-9-], starting and ending with a
 * letter or digit.  Namespaces. */
bool gs_k8s_label_ok(const char *s);

/* A DNS-1123 subdomain: 1..253 characters, labels of [a-z0-9-] (each
 * starting and ending with a letter or digit) joined by single dots.  Pod,
 * claim and node names, the DRA driver's name. */
bool gs_k8s_subdomain_ok(const char *s);

/* A claim's UID as the kubelet and the control socket give it: 1..36 of
 * hex digits (either case) and '-'. */
bool gs_k8s_uid_ok(const char *s);

#endif
