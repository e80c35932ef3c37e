/* chat_template.c — the public face of the Jinja interpreter: defaults for the limits
 * and the template handle. The work is in jinja_*.c (see jinja.h).
 *
 * Thread-safe as chat_template.h states: the parsed template is read-only. */
#include "chat_template.h"

#include "jinja.h"

struct chat_template {
    jinja_template *jt;
};

#define CT_DEFAULT_OUTPUT ((size_t)1 << 20)
#define CT_DEFAULT_SECONDS 1.0
#define CT_DEFAULT_STEPS 10000000ull
#define CT_DEFAULT_MEMORY ((size_t)128 << 20)

int chat_template_create(chat_template **out, const char *src, size_t n, char *err,
                         size_t err_bytes) {
    *out = NULL;
    if (err && err_bytes) err[0] = 0;
    if (!src && n) return ifd_errf(err, err_bytes, IFD_ERR_INVALID, "no template source");
    chat_template *t = calloc(1, sizeof(*t));
    if (!t) return ifd_errf(err, err_bytes, IFD_ERR_NOMEM, "out of memory");
    int rc = jinja_parse(&t->jt, src ? src : "", n, err, err_bytes);
    if (rc) {
        free(t);
        return rc;
    }
    *out = t;
    return IFD_OK;
}

int chat_template_render(const chat_template *t, const cJSON *ctx, const chat_template_limits *lim,
                         char **out, size_t *out_bytes, char *err, size_t err_bytes) {
    *out = NULL;
    if (out_bytes) *out_bytes = 0;
    if (!t) return ifd_errf(err, err_bytes, IFD_ERR_INVALID, "no template");
    chat_template_limits zero = {0};
    if (!lim) lim = &zero;
    jinja_render_opts o = {
        .max_output_bytes = lim->max_output_bytes ? lim->max_output_bytes : CT_DEFAULT_OUTPUT,
        .max_memory_bytes = lim->max_memory_bytes ? lim->max_memory_bytes : CT_DEFAULT_MEMORY,
        .max_seconds = lim->max_seconds > 0 ? lim->max_seconds : CT_DEFAULT_SECONDS,
        .max_steps = lim->max_steps ? lim->max_steps : CT_DEFAULT_STEPS,
        .now = lim->fixed_now,
    };
    return jinja_render(t->jt, ctx, &o, out, out_bytes, err, err_bytes);
}

void chat_template_destroy(chat_template *t) {
    if (!t) return;
    jinja_template_free(t->jt);
    free(t);
}
