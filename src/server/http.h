/* http.h — the HTTP front end (on httpd.c): routing, API keys, CORS, the endpoints,
 * streaming, one error path for every client-visible error, the per-request log line.
 * Runs on the httpd I/O threads; http_start/http_stop on the main thread. */
#ifndef INFERD_SERVER_HTTP_H
#define INFERD_SERVER_HTTP_H
#include "../util/layer/server.h"

#include "server.h"

int http_start(server *s, char *err, size_t err_bytes);
void http_stop(server *s); /* closes every connection (their requests end SHUTDOWN) */
/* (Re)load the API keys from --api-key / --api-key-file (SIGHUP). */
int http_load_keys(server *s, char *err, size_t err_bytes);

#endif
