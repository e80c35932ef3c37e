/* server.h — the server object shared by the server modules: configuration, engine,
 * model facts, metrics, admission counters, the list of live generations.
 *
 * Written by the main thread at startup (and the loader thread once the model is
 * up); read by the HTTP threads, the engine callbacks and the watcher. The fields
 * below say which lock guards what. */
#ifndef INFERD_SERVER_SERVER_H
#define INFERD_SERVER_SERVER_H
#include "../util/layer/server.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "chat.h"
#include "config.h"
#include "inferd.h"
#include "metrics.h"

struct httpd;
struct gen_req;
struct rsp_store;

typedef enum srv_state {
    SRV_LOADING = 0,
    SRV_READY = 1,
    SRV_DRAINING = 2,
    SRV_FAILED = 3,
    SRV_DEVICE_LOST = 4, /* the engine died (a sticky device error): not ready, exiting */
} srv_state;

typedef struct server {
    server_config cfg;
    _Atomic int state; /* srv_state */
    /* set once by the loader before state becomes SRV_READY; read-only afterwards */
    inferd_engine *engine;
    const struct model *model;
    chat_ctx *chat;
    int32_t max_model_len, n_vocab;
    char **names; /* served model names; names[0] is reported */
    int n_names;
    int64_t created; /* unix time of start */
    metrics *metrics;
    struct httpd *httpd;

    pthread_mutex_t keys_mu; /* API keys (reloaded on SIGHUP) */
    char **keys;
    int n_keys;

    pthread_mutex_t adm_mu; /* admission: requests / prompt tokens waiting for a first token */
    int64_t pending_requests, pending_tokens;

    pthread_mutex_t gen_mu; /* the live generations (gen.c) */
    struct gen_req *gens;
    int64_t n_gens;

    _Atomic int64_t inflight; /* HTTP requests between arrival and completion */

    pthread_t watcher; /* gen.c: disconnects, keep-alives, queue deadlines */
    _Atomic bool watcher_stop;
    bool watcher_started;

    struct rsp_store *responses; /* finished /v1/responses (rsp.h; thread-safe) */
    struct so_cache *grammars;   /* compiled structured-output grammars (structured.h) */
    struct pd_server *pd;        /* prefill/decode disaggregation (pd.h), or NULL (role both) */

    pthread_mutex_t clients_mu; /* per-client concurrent generations (http.c) */
    struct client_slot *clients;
    int n_client_slots;
} server;

/* Entry point for `inferd serve`: parse the configuration from argv, run until
 * SIGTERM/SIGINT, drain, and return the exit code. */
int server_main(int argc, char **argv);

/* Is this the served model? NULL (not given) matches. */
bool server_model_matches(const server *s, const char *name);
/* The served name a request asked for (the server's own copy), names[0] for NULL, or
 * NULL when it names no served model. */
const char *server_model_name(const server *s, const char *name);

#endif
