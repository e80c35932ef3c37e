/* server.c — `inferd serve` lifecycle: configuration, the listening socket (up before
 * the model so /health answers while it loads), the loader thread, signals, graceful
 * shutdown.
 *
 * Signals: SIGTERM, SIGINT and SIGHUP are blocked in every thread (the mask is set
 * before any thread starts) and taken synchronously by the main thread with
 * sigtimedwait — no async handlers. SIGTERM/SIGINT: not ready, new requests get 503,
 * in-flight requests get --shutdown-timeout seconds, then are aborted; a second
 * signal aborts at once. SIGHUP re-reads the API key file.
 *
 * A lost device (inferd_engine_healthy false: a sticky CUDA error) takes the same path:
 * not ready (503 device_lost, for 0.5 s at least), the in-flight requests get their
 * errors within ~2 s (then they are aborted), and serve returns 1 so that the
 * supervisor (systemd Restart=, docker --restart) starts a fresh process. */
#include "server.h"
#include "pd.h"
#include "structured.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine_model.h"
#include "gen.h"
#include "http.h"
#include "rsp.h"
#include "model/model.h"
#include "util/common.h"
#include "util/log.h"

bool server_model_matches(const server *s, const char *name) { return server_model_name(s, name) != NULL; }

const char *server_model_name(const server *s, const char *name) {
    if (!name) return s->names[0];
    for (int i = 0; i < s->n_names; i++)
        if (!strcmp(name, s->names[i])) return s->names[i];
    return NULL;
}

static void add_name(server *s, const char *name, size_t n) {
    while (n && (*name == ' ')) name++, n--;
    while (n && name[n - 1] == ' ') n--;
    if (!n) return;
    for (int i = 0; i < s->n_names; i++)
        if (strlen(s->names[i]) == n && !memcmp(s->names[i], name, n)) return;
    char **v = realloc(s->names, sizeof *v * (size_t)(s->n_names + 1));
    if (!v) return;
    s->names = v;
    if ((v[s->n_names] = strndup(name, n))) s->n_names++;
}

/* The served names: --served-model-name's, else the file's base name and that name
 * without ".gguf". Never a directory path (a '/' in a served name is refused at
 * start), never the GGUF's general.name (responses echo the name the client used). */
static int set_names(server *s, char *err, size_t eb) {
    if (s->cfg.served_model_name && s->cfg.served_model_name[0]) {
        for (const char *p = s->cfg.served_model_name; *p;) {
            const char *c = strchr(p, ',');
            size_t n = c ? (size_t)(c - p) : strlen(p);
            add_name(s, p, n);
            p += n + (c ? 1 : 0);
        }
    }
    if (!s->n_names && s->cfg.random_weights) { /* the in-memory model's name */
        inferd_engine_options o;
        inferd_engine_options_default(&o);
        config_engine_options(&s->cfg, &o);
        char name[128];
        snprintf(name, sizeof name, "random-%s-%s", o.random_weights, o.random_dtype);
        add_name(s, name, strlen(name));
    }
    if (!s->n_names) {
        const char *path = s->cfg.model;
        const char *base = strrchr(path, '/');
        base = base ? base + 1 : path;
        add_name(s, base, strlen(base));
        size_t n = strlen(base);
        if (n > 5 && !strcmp(base + n - 5, ".gguf")) add_name(s, base, n - 5);
    }
    if (!s->n_names) return ifd_errf(err, eb, IFD_ERR_INVALID, "no served model name");
    for (int i = 0; i < s->n_names; i++)
        if (strchr(s->names[i], '/'))
            return ifd_errf(err, eb, IFD_ERR_INVALID,
                            "--served-model-name '%s': a served name may not contain '/'", s->names[i]);
    return 0;
}

/* `inferd serve` without -m: the default model fetched by scripts/fetch_default_model.sh,
 * looked up in ./models-cache/, next to the repository the binary was built in
 * (build/inferd -> models-cache/), and in the install prefix (bin/ -> share/inferd/). */
static char *default_model_path(void) {
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 0] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) *slash = 0;
    char cand[3][4200];
    snprintf(cand[0], sizeof cand[0], "models-cache/default.gguf");
    snprintf(cand[1], sizeof cand[1], "%s/../models-cache/default.gguf", exe);
    snprintf(cand[2], sizeof cand[2], "%s/../share/inferd/default.gguf", exe);
    for (int i = 0; i < 3; i++)
        if (n > 0 || i == 0)
            if (access(cand[i], R_OK) == 0) return strdup(cand[i]);
    return NULL;
}

static void *loader_main(void *arg) {
    server *s = arg;
    const server_config *c = &s->cfg;
    char err[512] = "";
    inferd_engine_options o;
    inferd_engine_options_default(&o);
    config_engine_options(c, &o);
    o.threaded = true;
    double t0 = ifd_now_s();
    inferd_engine *e = NULL;
    char *tmpl = NULL;
    if (inferd_engine_create(&e, &o, err, sizeof err)) goto fail;
    if (err[0]) slog("warn", "%s", err); /* e.g. max_model_len clamped to the KV pool */
    s->engine = e;
    s->model = inferd_model(e);
    s->max_model_len = inferd_max_model_len(e);
    s->n_vocab = inferd_n_vocab(e);
    if (c->chat_template_file) {
        size_t n;
        char e2[256];
        if (ifd_read_file(c->chat_template_file, &tmpl, &n, e2, sizeof e2)) {
            snprintf(err, sizeof err, "--chat-template-file: %s", e2);
            goto fail;
        }
    }
    chat_limits lim = {.max_seconds = c->template_timeout_s, .max_output_bytes = (size_t)c->template_max_bytes};
    char e3[400];
    if (chat_create(&s->chat, s->model, tmpl, &lim, e3, sizeof e3)) {
        snprintf(err, sizeof err, "chat template: %s", e3);
        goto fail;
    }
    free(tmpl);
    tmpl = NULL;
    if (pd_start(s, err, sizeof err)) goto fail;
    atomic_store(&s->state, SRV_READY);
    char fields[1024];
    snprintf(fields, sizeof fields,
             "\"model\":\"%s\",\"max_model_len\":%d,\"n_vocab\":%d,\"chat_template\":\"%s\",\"load_s\":%.3f",
             s->names[0], (int)s->max_model_len, (int)s->n_vocab, chat_template_origin(s->chat),
             ifd_now_s() - t0);
    slog_fields("info", "ready", fields);
    return NULL;
fail:
    free(tmpl);
    slog("error", "model load failed: %s", err);
    atomic_store(&s->state, SRV_FAILED);
    return NULL;
}

static void server_deinit(server *s) {
    pd_stop(s); /* its imports answered and its KV endpoint closed before the engine goes */
    if (s->engine) inferd_engine_destroy(s->engine);
    chat_destroy(s->chat);
    metrics_destroy(s->metrics);
    rsp_store_destroy(s->responses);
    so_cache_destroy(s->grammars);
    for (int i = 0; i < s->n_keys; i++) free(s->keys[i]);
    free(s->keys);
    for (int i = 0; i < s->n_names; i++) free(s->names[i]);
    free(s->names);
    server_config_deinit(&s->cfg);
    pthread_mutex_destroy(&s->keys_mu);
    pthread_mutex_destroy(&s->adm_mu);
    pthread_mutex_destroy(&s->gen_mu);
    pthread_mutex_destroy(&s->clients_mu);
}

int server_main(int argc, char **argv) {
    static server S; /* one per process: the signal loop below owns it */
    server *s = &S;
    memset(s, 0, sizeof *s);
    pthread_mutex_init(&s->keys_mu, NULL);
    pthread_mutex_init(&s->adm_mu, NULL);
    pthread_mutex_init(&s->gen_mu, NULL);
    pthread_mutex_init(&s->clients_mu, NULL);
    server_config_init(&s->cfg);
    char err[512];
    int rc = server_config_load(&s->cfg, argc, argv, err, sizeof err);
    if (rc) {
        if (rc < 0) fprintf(stderr, "inferd serve: %s\n", err);
        server_deinit(s);
        return rc > 0 ? 0 : 2;
    }
    if (!s->cfg.model && !s->cfg.random_weights && !(s->cfg.model = default_model_path())) {
        fprintf(stderr, "inferd serve: no model: give -m FILE (or INFERD_MODEL / \"model\" in --config), "
                        "or fetch the default one with scripts/fetch_default_model.sh\n");
        server_deinit(s);
        return 2;
    }
    s->created = (int64_t)time(NULL);
    if (set_names(s, err, sizeof err)) {
        fprintf(stderr, "inferd serve: %s\n", err);
        server_deinit(s);
        return 2;
    }
    if (rsp_store_create(&s->responses, s->cfg.responses_store_max, s->cfg.responses_store_max_bytes,
                         s->cfg.responses_store_ttl_s) ||
        !(s->grammars = so_cache_create(64)) || metrics_create(&s->metrics) || http_load_keys(s, err, sizeof err)) {
        fprintf(stderr, "inferd serve: %s\n", s->metrics ? err : "out of memory");
        server_deinit(s);
        return 2;
    }
    char *eff = server_config_effective_json(&s->cfg);
    if (eff) {
        size_t n = strlen(eff) + 16;
        char *f = malloc(n);
        if (f) {
            snprintf(f, n, "\"config\":%s", eff);
            slog_fields("info", "effective configuration", f);
            free(f);
        }
        free(eff);
    }

    /* Signals: blocked everywhere, taken by this thread only. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    atomic_store(&s->state, SRV_LOADING);
    if (http_start(s, err, sizeof err)) {
        fprintf(stderr, "inferd serve: %s\n", err);
        slog("error", "%s", err);
        server_deinit(s);
        return 1;
    }
    char fields[256];
    snprintf(fields, sizeof fields, "\"host\":\"%s\",\"port\":%lld", s->cfg.host, (long long)s->cfg.port);
    slog_fields("info", "listening", fields);
    pthread_t loader;
    if (pthread_create(&loader, NULL, loader_main, s) || gen_watch_start(s)) {
        slog("error", "cannot start threads");
        http_stop(s);
        server_deinit(s);
        return 1;
    }
    bool loader_joined = false, drain = false, aborted = false, forced = false, lost = false;
    double deadline = 0, hard_deadline = 0, lost_at = 0;
    int exit_code = 0;
    for (;;) {
        struct timespec ts = {0, 100 * 1000 * 1000};
        int sig = sigtimedwait(&sigs, NULL, &ts);
        int st = atomic_load(&s->state);
        if (sig == SIGHUP) {
            if (http_load_keys(s, err, sizeof err)) slog("error", "SIGHUP: %s (keeping the old keys)", err);
            else slog("info", "SIGHUP: API keys reloaded");
        } else if (sig == SIGTERM || sig == SIGINT) {
            if (!drain) {
                drain = true;
                deadline = ifd_now_s() + s->cfg.shutdown_timeout_s;
                slog("info", "%s: shutting down; %lld requests in flight, %.1f s to finish",
                     sig == SIGTERM ? "SIGTERM" : "SIGINT", (long long)atomic_load(&s->inflight),
                     s->cfg.shutdown_timeout_s);
            } else if (!aborted) {
                deadline = 0; /* a second signal: abort now */
            }
        }
        if (!loader_joined && st != SRV_LOADING) {
            pthread_join(loader, NULL);
            loader_joined = true;
            if (st == SRV_FAILED) {
                exit_code = 1;
                break;
            }
        }
        if (loader_joined && !lost && s->engine && !inferd_engine_healthy(s->engine)) {
            /* a sticky device error: the engine has failed every request and refuses new
             * ones. Not ready from now on; drain as for SIGTERM, but briefly (the
             * requests in flight are only waiting to send their errors), and exit
             * non-zero so that systemd / docker restart the process. */
            lost = true;
            lost_at = ifd_now_s();
            exit_code = 1;
            atomic_store(&s->state, SRV_DEVICE_LOST);
            const double soon = ifd_now_s() + IFD_MIN(s->cfg.shutdown_timeout_s, 2.0);
            deadline = drain ? IFD_MIN(deadline, soon) : soon;
            drain = true;
            slog("error", "the device is lost: not ready; %lld requests in flight end with errors; exiting",
                 (long long)atomic_load(&s->inflight));
        }
        if (!drain || !loader_joined) continue;
        int expected = SRV_READY;
        atomic_compare_exchange_strong(&s->state, &expected, SRV_DRAINING);
        const double now = ifd_now_s();
        /* after a loss, answer 503 device_lost for half a second at least, so that a
         * health probe sees why rather than only a refused connection */
        if (atomic_load(&s->inflight) == 0 && (!lost || now >= lost_at + 0.5)) break;
        if (!aborted && now >= deadline) {
            slog("warn", "shutdown timeout: aborting %lld requests in flight", (long long)atomic_load(&s->inflight));
            gen_abort_all(s, ABORT_SHUTDOWN);
            pd_interrupt(s); /* an import waiting on a hung prefill instance ends now */
            aborted = true;
            hard_deadline = now + (lost ? 3 : 10);
        }
        if (aborted && now >= hard_deadline) {
            forced = true;
            break;
        }
    }
    gen_watch_stop(s);
    if (forced) slog("warn", "closing %lld requests still open", (long long)atomic_load(&s->inflight));
    http_stop(s); /* closes every connection; their generations are aborted */
    if (!loader_joined) pthread_join(loader, NULL);
    server_deinit(s);
    slog("info", "stopped");
    return exit_code;
}
