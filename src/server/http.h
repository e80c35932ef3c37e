/* http.h — the HTTP front end on libmicrohttpd: routing, API keys, body limits, the
 * endpoints, streaming through suspend/resume, one error path for every client-visible
 * error, the per-request log line. Runs on MHD's thread pool; http_start/http_stop on
 * the main thread. */
#ifndef INFERD_SERVER_HTTP_H
#define INFERD_SERVER_HTTP_H

#include "server.h"

int http_start(server *s, char *err, size_t err_bytes);
void http_stop(server *s); /* every connection must have been resumed */
/* (Re)load the API keys from --api-key / --api-key-file (SIGHUP). */
int http_load_keys(server *s, char *err, size_t err_bytes);

#endif
