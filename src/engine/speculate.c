/* speculate.c — speculative decoding in the engine (issue 11): before each step, the
 * running decodes get draft tokens (n-gram lookup or the draft model; with both, per
 * sequence and step the one that promises more tokens per ms by its own acceptance),
 * appended to their tokens as sched_seq.n_spec; the scheduler plans each as one
 * verification entry (1 + k tokens and rows in the flat batch with the plain decodes
 * and prefill chunks); engine.c's postprocess verifies (spec_verify there) and calls
 * spec_observe.
 *
 * Verification is exact by construction: at each verified position the target's token
 * is drawn with the request's sampler and its own RNG counter, exactly as plain
 * decoding would draw it from the same (batch-invariant, hence bit-identical) logits,
 * and a draft token is accepted iff it equals that draw. For a deterministic proposal
 * (the draft model's greedy token, an n-gram continuation) this is the standard
 * rejection rule with q a point mass: accept x with probability p(x) = min(1, p(x)/q(x)),
 * on rejection a draw from normalize(max(0, p - q)) = p without x. So the output is
 * plain decoding's, token for token, greedy or seeded, whatever runs beside it.
 *
 * Adaptive k: per sequence and proposer a moving average a of the per-token acceptance; the
 * expected tokens of a verification with k drafts are 1 + a + ... + a^k. The costs of
 * a target forward of n tokens and of a draft round are measured at start (spec_init,
 * timed forwards on this backend; the target's sizes seen while serving then replace
 * the table's); each step picks the k of every sequence in 0..K that
 * maximizes expected tokens per predicted step time, so no choice falls below plain
 * decoding by the model's own numbers, and k = 0 everywhere runs a plain step (no draft
 * forward, no extra rows). A sequence whose acceptance falls below min_acceptance stops
 * for SPEC_RETRY tokens (doubling each time), then starts over from the prior. A
 * sequence not yet measured gets SPEC_PROBE drafts so that its acceptance is learnt,
 * but only where a gate says speculation could pay at all this step (an optimistic
 * acceptance, SPEC_GATE_ALPHA, must promise SPEC_GATE_GAIN, with the sequences still
 * prefilling counted as decodes; where all are measured, any gain opens it): on a
 * machine where a verification or a draft round costs too much, no step pays for
 * exploration. A measured sequence left plain forgets its acceptance after SPEC_IDLE
 * steps (doubling), and probes again where the gate lets it. The draft's catch-up of a
 * sequence counts, spread over the tokens it has left. The probes of all sequences are
 * pooled per proposer: where their acceptance is below min_acceptance the proposer rests
 * (no sequence probes it) for SPEC_REST decoding sequence-steps, doubling while it comes
 * back as low, so a proposer that almost never agrees stops costing each new answer
 * its exploration. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../util/common.h"
#include "../util/log.h"
#include "engine_internal.h"
#include "engine_tap.h"
#include "logprobs.h"
#include "spec.h"

#define SPEC_PRIOR 0.6f    /* the acceptance assumed before any observation */
#define SPEC_PROBE 1       /* drafts a sequence still learning its acceptance always gets */
#define SPEC_GATE_ALPHA 0.8f /* the gate's acceptance for sequences not yet measured */
#define SPEC_GATE_GAIN 1.1   /* exploration runs only where speculation could gain this much */
#define SPEC_EMA 0.15f     /* weight of one observed draft token */
#define SPEC_MIN_OBS 6     /* observations before a sequence may be switched off */
#define SPEC_RETRY 32      /* tokens a switched-off sequence decodes plainly (doubling, to
                              SPEC_RETRY_MAX, each time it is switched off again) */
#define SPEC_RETRY_MAX 2048
#define SPEC_IDLE 16       /* steps a measured sequence left plain keeps its acceptance
                              (doubling, to SPEC_RETRY_MAX, each time it forgets it) */
#define SPEC_POOL_MIN 12   /* probes pooled over sequences before a proposer may rest */
#define SPEC_POOL_MAX 64   /* pooled probes beyond which the pool halves (a window) */
#define SPEC_REST 256      /* decoding sequence-steps of a proposer's first rest (doubling,
                              to SPEC_REST_MAX, while it rests again after each) */
#define SPEC_REST_MAX 8192
#define SPEC_CAL_MS 400.0  /* time the start-up cost measurement may take, each model */
#define SPEC_OBS_MIN 3     /* forwards of one size seen before their average replaces the table */
#define SPEC_OBS_W 0.2     /* weight of one seen forward in that average */

/* The proposers: a candidate's src[] and a sequence's spec_src are SRC_NGRAM or
 * SRC_DRAFT (0: none; src[] negated: hidden by hide_others). A sequence's per-proposer
 * arrays (spec_alpha[], spec_obs[], ...) are indexed by prop_ix(src). */
enum { SRC_NGRAM = 1, SRC_DRAFT = 2 };
static inline int prop_ix(int32_t src) { return (int)src - 1; }
static const int32_t SRC_OF[2] = {SRC_NGRAM, SRC_DRAFT}; /* prop_ix's inverse */

/* ---- cost tables ----------------------------------------------------------------------- */

static double cost_at(const double *n, const double *ms, int32_t cnt, double t) {
    if (cnt <= 0) return t;
    if (cnt == 1 || t <= n[0]) return ms[0] * (t / n[0]);
    for (int32_t i = 1; i < cnt; i++)
        if (t <= n[i]) return ms[i - 1] + (ms[i] - ms[i - 1]) * (t - n[i - 1]) / (n[i] - n[i - 1]);
    const double slope = IFD_MAX(0.0, (ms[cnt - 1] - ms[cnt - 2]) / (n[cnt - 1] - n[cnt - 2]));
    return ms[cnt - 1] + slope * (t - n[cnt - 1]);
}

/* A target forward of n tokens, each with its logits row. The start-up table has a few
 * sizes only (its time is capped) and interpolates between them over the steps of the
 * kernels' tile widths: on a 2-core AVX-512 host (1.5B Q4_K_M, Q6_K in tiles of 4
 * tokens then) it put 4 tokens at 50.4 ms between 2 and 5 where they take 47-48, so one
 * draft row at batch 4 looked 8% dearer than a plain step, not 12% (and in real steps,
 * with their contexts, 13-24%).
 * The forwards of that size seen while serving, where enough were, are the cost; else
 * the table times the correction factor. */
static double fwd_cost(const spec_state *sp, int32_t n) {
    if (n >= 1 && n <= SPEC_OBS_N && sp->obs_cnt[n] >= SPEC_OBS_MIN) return sp->obs_ms[n];
    return sp->f_fwd * cost_at(sp->cost_n, sp->cost_ms, sp->n_cost, n);
}

/* One forward of n tokens, all with logits rows, took ms: into its size's average (an
 * outlier, a step that lost its core, counts as twice the average at most). */
static void observe_size(spec_state *sp, int32_t n, double ms) {
    if (n < 1 || n > SPEC_OBS_N || !(ms > 0) || ms > 1e9) return;
    const double ref = sp->obs_cnt[n] ? sp->obs_ms[n] : fwd_cost(sp, n);
    if (ref > 0) ms = IFD_MIN(IFD_MAX(ms, 0.5 * ref), 2.0 * ref);
    sp->obs_ms[n] = sp->obs_cnt[n] ? (1.0 - SPEC_OBS_W) * sp->obs_ms[n] + SPEC_OBS_W * ms : ms;
    if (sp->obs_cnt[n] < INT32_MAX) sp->obs_cnt[n]++;
}

/* Time forwards of one sequence of n tokens (every row's logits) for growing n on be,
 * writing KV into the pool's first blocks (nothing lives there yet). */
static int32_t measure(backend *be, int32_t max_n, int32_t max_logits, int32_t block_size,
                       int32_t n_blocks, int32_t n_vocab, const int32_t *sizes, int32_t n_sizes,
                       bool all_rows, double *out_n, double *out_ms) {
    const int32_t cap = IFD_MIN(all_rows ? IFD_MIN(max_n, max_logits) : max_n, n_blocks * block_size);
    int32_t top = 0;
    for (int32_t i = 0; i < n_sizes; i++)
        if (sizes[i] <= cap) top = IFD_MAX(top, sizes[i]);
    if (top < 1) return 0;
    const int32_t nb = (top + block_size - 1) / block_size;
    int32_t *tok = calloc((size_t)top, sizeof(int32_t)), *pos = malloc((size_t)top * sizeof(int32_t));
    int32_t *slot = malloc((size_t)top * sizeof(int32_t)), *li = malloc((size_t)top * sizeof(int32_t));
    int32_t *bt = malloc((size_t)nb * sizeof(int32_t));
    float *logits = malloc((size_t)top * (size_t)n_vocab * sizeof(float));
    int32_t cnt = 0;
    if (tok && pos && slot && li && bt && logits) {
        for (int32_t i = 0; i < top; i++) {
            tok[i] = 1 + i % 7;
            pos[i] = slot[i] = li[i] = i;
        }
        for (int32_t i = 0; i < nb; i++) bt[i] = i;
        double spent = 0;
        bool warm = false;
        for (int32_t si = 0; si < n_sizes && spent < SPEC_CAL_MS; si++) {
            const int32_t n = sizes[si];
            if (n > cap) continue;
            int32_t seq_start[2] = {0, n}, ctx = n;
            const ifd_batch b = {.n_tokens = n, .token_ids = tok, .positions = pos, .slot_mapping = slot,
                                 .n_seqs = 1, .seq_start = seq_start, .context_len = &ctx,
                                 .block_table = bt, .max_blocks_per_seq = nb,
                                 .n_logits = all_rows ? n : 1, .logits_index = all_rows ? li : li + n - 1};
            double best = 1e30;
            for (int rep = warm ? 0 : -1; rep < 2; rep++) { /* rep -1: the first run warms up */
                const double t0 = ifd_now_s();
                if (backend_forward(be, &b, logits) != IFD_OK) goto done;
                const double ms = (ifd_now_s() - t0) * 1e3;
                spent += ms;
                if (rep >= 0) best = IFD_MIN(best, ms);
            }
            warm = true;
            /* sorted by n (the sizes come in order of importance) */
            int32_t at = cnt;
            while (at > 0 && out_n[at - 1] > n) {
                out_n[at] = out_n[at - 1];
                out_ms[at] = out_ms[at - 1];
                at--;
            }
            out_n[at] = n;
            out_ms[at] = best;
            cnt++;
        }
    }
done:
    free(tok);
    free(pos);
    free(slot);
    free(li);
    free(bt);
    free(logits);
    return cnt;
}

/* ---- lifecycle ------------------------------------------------------------------------- */

int spec_init(inferd_engine *e, model *dm, backend_kind kind, const backend_config *bc, char *err,
              size_t err_bytes) {
    spec_state *sp = &e->spec;
    const inferd_engine_options *o = &e->opt;
    memset(sp, 0, sizeof *sp);
    sp->K = o->num_speculative_tokens;
    if (!dm && !o->speculative_ngram) return IFD_OK;
    if (sp->K < 1 || sp->K > 16) {
        model_destroy(dm);
        return ifd_errf(err, err_bytes, IFD_ERR_INVALID, "--num-speculative-tokens must be in 1..16");
    }
    sp->ngram = o->speculative_ngram;
    sp->ngram_min = o->ngram_min > 0 ? o->ngram_min : 1;
    sp->ngram_max = o->ngram_max > 0 ? o->ngram_max : 4;
    if (sp->ngram && (sp->ngram_max < sp->ngram_min || sp->ngram_max > SPEC_NGRAM_MAX)) {
        model_destroy(dm);
        return ifd_errf(err, err_bytes, IFD_ERR_INVALID, "--ngram-min/--ngram-max must satisfy 1 <= min <= max <= %d",
                        SPEC_NGRAM_MAX);
    }
    sp->adaptive = o->speculative_adaptive;
    sp->min_acceptance = o->spec_min_acceptance > 0 ? (float)o->spec_min_acceptance : 0.3f;
    if (!(o->draft_p_min >= 0 && o->draft_p_min <= 1)) {
        model_destroy(dm);
        return ifd_errf(err, err_bytes, IFD_ERR_INVALID, "--draft-p-min must be in 0..1");
    }
    sp->p_min = (float)o->draft_p_min;
    if (dm) {
        backend_config dbc = *bc;
        dbc.share_threads = e->be; /* the CPU workers of the target (never both at once) */
        /* a restricted lm head: ids it leaves out only lower the acceptance (the draft's
         * picks are argmax proposals the target verifies) */
        if (o->draft_vocab < 0) {
            model_destroy(dm);
            return ifd_errf(err, err_bytes, IFD_ERR_INVALID, "--draft-vocab must be >= 0");
        }
        dbc.logits_rows = (int64_t)o->draft_vocab < (int64_t)dm->hp.n_vocab ? o->draft_vocab : 0;
        if (dbc.logits_rows && backend_resolve_kind(kind) != BACKEND_CPU) {
            /* the device backends keep the whole head (a command line from a CPU host
             * still starts on a GPU host) */
            slog("warn", "--draft-vocab applies to the CPU backend only: the draft keeps its whole lm head");
            dbc.logits_rows = 0;
        }
        sp->d_rows = dbc.logits_rows ? (int32_t)dbc.logits_rows : (int32_t)dm->hp.n_vocab;
        int rc = draft_create(&sp->d, dm, kind, &dbc, o->enable_prefix_caching, err, err_bytes);
        if (rc) return rc;
    }
    const size_t S = (size_t)o->max_num_seqs;
    sp->cand = malloc(S * sizeof *sp->cand);
    sp->cap = malloc(S * sizeof(int32_t));
    sp->alt = malloc(S * sizeof(int32_t));
    sp->k = malloc(S * sizeof(int32_t));
    sp->src = malloc(S * sizeof(int32_t));
    sp->need = malloc(S * sizeof(int32_t));
    sp->who = malloc(S * sizeof(int32_t));
    sp->got = malloc(S * sizeof(int32_t));
    sp->ngram_buf = malloc(S * (size_t)sp->K * sizeof(int32_t));
    sp->jobs = malloc(S * sizeof(draft_job));
    sp->catchup = malloc(S * sizeof(double));
    e->vtok = malloc((size_t)(sp->K + 1) * sizeof(int32_t));
    if (!sp->cand || !sp->cap || !sp->alt || !sp->k || !sp->src || !sp->need || !sp->who || !sp->got || !sp->ngram_buf || !sp->jobs || !sp->catchup || !e->vtok)
        return ifd_errf(err, err_bytes, IFD_ERR_NOMEM, "engine: out of memory");
    sp->on = true;
    sp->f_fwd = sp->f_draft = 1.0;
    /* the costs: target forwards of 1 .. K+1 tokens and a few batch sizes beyond, draft
     * rounds of 1 .. max_num_seqs tokens */
    int32_t sizes[24], ns = 0;
    const int32_t K1 = sp->K + 1;
    /* in order of importance (the time cap may end the list): a decode, a verification
     * of K, the batch sizes beyond, then the verifications of 2 .. K-1 */
    sizes[ns++] = 1;
    if (K1 > 2) sizes[ns++] = K1;
    sizes[ns++] = 2;
    for (int32_t m = 2 * K1; ns < 14 && m <= 4096; m *= 2) sizes[ns++] = m;
    for (int32_t m = 3; m < K1 && ns < 24; m++) sizes[ns++] = m;
    /* the target: every row (a verification's); the draft: one row (a round's per sequence) */
    sp->n_cost = measure(e->be, e->opt.max_num_batched_tokens, e->max_logits, e->opt.block_size,
                         bc->n_blocks, e->n_vocab, sizes, ns, true, sp->cost_n, sp->cost_ms);
    if (sp->d) {
        int32_t ds[12], nd = 0;
        for (int32_t m = 1; nd < 11 && m <= IFD_MAX(2 * o->max_num_seqs, 4); m *= 2) ds[nd++] = m;
        if (ds[nd - 1] < 64) ds[nd++] = 64; /* a catch-up's cost per token */
        sp->n_dcost = measure(sp->d->be, o->max_num_batched_tokens, 1, o->block_size, bc->n_blocks,
                              e->n_vocab, ds, nd, false, sp->dcost_n, sp->dcost_ms);
    }
    char msg[512];
    size_t k = (size_t)snprintf(msg, sizeof msg, "speculative decoding: K %d, %s%s%s, %s; target forward ms",
                                sp->K, sp->d ? "draft model " : "", sp->d ? sp->d->m->name : "",
                                sp->ngram ? (sp->d ? " + n-gram" : "n-gram") : "",
                                sp->adaptive ? "adaptive" : "fixed k");
    for (int32_t i = 0; i < sp->n_cost && k < sizeof msg; i++)
        k += (size_t)snprintf(msg + k, sizeof msg - k, " %g:%.2f", sp->cost_n[i], sp->cost_ms[i]);
    if (sp->d && k < sizeof msg) k += (size_t)snprintf(msg + k, sizeof msg - k, "; draft forward ms");
    for (int32_t i = 0; sp->d && i < sp->n_dcost && k < sizeof msg; i++)
        k += (size_t)snprintf(msg + k, sizeof msg - k, " %g:%.2f", sp->dcost_n[i], sp->dcost_ms[i]);
    slog_fields("info", msg, NULL);
    return IFD_OK;
}

void spec_deinit(inferd_engine *e) {
    spec_state *sp = &e->spec;
    draft_destroy(sp->d);
    free(sp->cand);
    free(sp->cap);
    free(sp->alt);
    free(sp->k);
    free(sp->src);
    free(sp->need);
    free(sp->who);
    free(sp->got);
    free(sp->ngram_buf);
    free(sp->jobs);
    free(sp->catchup);
    free(e->vtok);
    memset(sp, 0, sizeof *sp);
    e->vtok = NULL;
}

void spec_seq_done(inferd_engine *e, sequence *s) {
    if (e->spec.d) draft_seq_release(e->spec.d, &s->dseq);
}

/* ---- choosing k ------------------------------------------------------------------------ */

/* Whether s is still learning proposer src's acceptance (too few observations to use or
 * to switch it off by). */
static bool learning(const sequence *s, int32_t src) { return s->spec_obs[prop_ix(src)] < SPEC_MIN_OBS; }

/* The acceptance of proposer src (1 n-gram, 2 the draft model; 0: none) for s.
 * sp->optimistic (the gate): an acceptance not yet measured counts as SPEC_GATE_ALPHA. */
static float alpha_of(const spec_state *sp, const sequence *s, int32_t src) {
    if (src != SRC_NGRAM && src != SRC_DRAFT) return 0.0f;
    const int p = prop_ix(src);
    if (!learning(s, src)) return s->spec_alpha[p];
    if (sp->optimistic) return SPEC_GATE_ALPHA;
    return s->spec_obs[p] > 0 ? s->spec_alpha[p] : SPEC_PRIOR;
}

/* The draft rounds' ms for k[] drafts per candidate (sp->k: the choice; sp->got: the
 * rounds that ran): the first feeds need[] tokens per sequence, the others one each. */
static double draft_ms(const spec_state *sp, int32_t n, const int32_t *k) {
    int32_t L = 0, first = 0;
    for (int32_t i = 0; i < n; i++)
        if (sp->src[i] == SRC_DRAFT && k[i] > 0) {
            L = IFD_MAX(L, k[i]);
            first += sp->need[i];
        }
    double ms = L > 0 ? cost_at(sp->dcost_n, sp->dcost_ms, sp->n_dcost, first) : 0;
    for (int32_t r = 1; r < L; r++) {
        int32_t m = 0;
        for (int32_t i = 0; i < n; i++) m += sp->src[i] == SRC_DRAFT && k[i] > r;
        ms += cost_at(sp->dcost_n, sp->dcost_ms, sp->n_dcost, m);
    }
    return ms;
}

/* 1 + a + ... + a^k: the tokens a step that verifies k drafts of acceptance a expects
 * (the target's own token included). */
static double expected_tokens(double a, int32_t k) {
    double g = 1, ex = 1;
    for (int32_t j = 0; j < k; j++) ex += (g *= a);
    return ex;
}

/* tokens per ms of a step whose target forward feeds fed tokens, plus draft_work ms of
 * the draft (its rounds and catch-up, before the draft's cost factor) */
static double tokens_per_ms(const spec_state *sp, double tokens, int32_t fed, double draft_work) {
    const double ms = fwd_cost(sp, fed) + sp->f_draft * draft_work;
    return ms > 0 ? tokens / ms : tokens;
}

/* Expected tokens per ms of the step with k[]: sum of 1 + a + ... + a^k over the decodes
 * (and n_plain plain ones), over the target forward of all their tokens plus the draft
 * rounds, plus the draft's catch-up of the sequences it has not seen, spread over their
 * tokens left (the expected tokens times catchup[]: near the end of an answer a catch-up
 * never pays). */
static double rate(const spec_state *sp, int32_t n) {
    double tokens = sp->n_plain, catchup = 0;
    int32_t fed = sp->n_plain;
    for (int32_t i = 0; i < n; i++) {
        const double ex = expected_tokens(alpha_of(sp, seq_of(sp->cand[i]), sp->src[i]), sp->k[i]);
        tokens += ex;
        fed += 1 + sp->k[i];
        if (sp->src[i] == SRC_DRAFT && sp->k[i] > 0) catchup += sp->catchup[i] * ex;
    }
    return tokens_per_ms(sp, tokens, fed, draft_ms(sp, n, sp->k) + catchup);
}

/* The k[] that maximizes rate(): the draft-model sequences at one level for all (their
 * rounds are shared), then each trimmed; the n-gram ones one token at a time to the
 * largest expected gain (probe: sequences still learning get SPEC_PROBE drafts first).
 * Returns the rate reached. */
static double optimize(spec_state *sp, int32_t n, bool probe) {
    for (int32_t i = 0; i < n; i++) sp->k[i] = 0;
    double best = rate(sp, n);
    int32_t bestL = 0;
    for (int32_t L = 1; L <= sp->K; L++) {
        for (int32_t i = 0; i < n; i++)
            if (sp->src[i] == SRC_DRAFT) sp->k[i] = IFD_MIN(L, sp->cap[i]);
        const double r = rate(sp, n);
        if (r > best) {
            best = r;
            bestL = L;
        }
    }
    for (int32_t i = 0; i < n; i++)
        if (sp->src[i] == SRC_DRAFT) sp->k[i] = IFD_MIN(bestL, sp->cap[i]);
    for (int32_t i = 0; i < n; i++)
        while (sp->src[i] == SRC_DRAFT && sp->k[i] > 0) {
            sp->k[i]--;
            const double r = rate(sp, n);
            if (r > best) {
                best = r;
                continue;
            }
            sp->k[i]++;
            break;
        }
    if (probe) {
        /* exploration: a sequence with fewer than SPEC_MIN_OBS observations gets at
         * least SPEC_PROBE drafts, or its acceptance would never be measured */
        for (int32_t i = 0; i < n; i++)
            if (sp->src[i] > 0 && sp->cap[i] > 0 && learning(seq_of(sp->cand[i]), sp->src[i]))
                sp->k[i] = IFD_MAX(sp->k[i], IFD_MIN(sp->cap[i], SPEC_PROBE));
        best = rate(sp, n);
    }
    for (;;) {
        int32_t bi = -1;
        double bg = -1;
        for (int32_t i = 0; i < n; i++) {
            if (sp->src[i] != SRC_NGRAM || sp->k[i] >= sp->cap[i]) continue;
            /* the gain of one more draft: expected_tokens()' next term */
            const double g = pow(alpha_of(sp, seq_of(sp->cand[i]), SRC_NGRAM), sp->k[i] + 1);
            if (g > bg) {
                bg = g;
                bi = i;
            }
        }
        if (bi < 0) break;
        sp->k[bi]++;
        const double r = rate(sp, n);
        if (r <= best) {
            sp->k[bi]--;
            break;
        }
        best = r;
    }
    return best;
}

/* Hides (hide) or shows again the candidates of every proposer but src (src 0: hides
 * none): a hidden one (src[] negated) is priced by rate() and optimize() as a plain
 * decode. */
static void hide_others(spec_state *sp, int32_t n, int32_t src, bool hide) {
    for (int32_t i = 0; i < n; i++)
        if (hide ? src > 0 && sp->src[i] > 0 && sp->src[i] != src : sp->src[i] < 0) sp->src[i] = -sp->src[i];
}

/* The gate of proposer src: could its candidates alone, every acceptance not yet measured
 * taken as SPEC_GATE_ALPHA, gain SPEC_GATE_GAIN in this step (the others as plain
 * decodes)? False where it has none. The margin is for exploration only: where all its
 * candidates are measured, any gain opens it (a margin there kept a prose answer's
 * sequence at a measured 0.47 plain for 16 steps, then 32, while its acceptance rose). */
static bool gate_open(spec_state *sp, int32_t n, int32_t src) {
    bool has = false, any_learning = false;
    for (int32_t i = 0; i < n; i++)
        if (sp->src[i] == src) {
            has = true;
            any_learning = any_learning || learning(seq_of(sp->cand[i]), src);
        }
    if (!has) return false;
    hide_others(sp, n, src, true);
    for (int32_t i = 0; i < n; i++) sp->k[i] = 0;
    const double plain = rate(sp, n), best = optimize(sp, n, false);
    hide_others(sp, n, src, false);
    for (int32_t i = 0; i < n; i++) sp->k[i] = 0;
    return best > plain * (any_learning ? SPEC_GATE_GAIN : 1.0);
}

/* n_plain: the sequences that are not candidates this step (still prefilling, or
 * waiting while the running set has room), counted by the gate as plain decodes: it
 * judges the load the batch is about to have, not a moment while the others prefill (a
 * probe then would cost every sequence a draft catch-up that the full batch never
 * repays). */
static void choose_k(spec_state *sp, int32_t n, int32_t n_plain) {
    if (!sp->adaptive) {
        for (int32_t i = 0; i < n; i++) sp->k[i] = sp->cap[i];
        return;
    }
    /* The gate, per proposer: could speculation pay in this step at all, with every
     * acceptance not yet measured taken as SPEC_GATE_ALPHA? Unless by SPEC_GATE_GAIN,
     * the proposer's sequences neither speculate nor probe: on a machine or at a load
     * where a verification or a draft round costs too much (measured), the step stays a
     * plain one instead of paying for exploration. Each proposer on its own, the draft
     * first: the n-gram's cheap rows must not open the gate to draft probes (a draft
     * round and a catch-up of the whole context each). A sequence whose draft is gated
     * off takes the n-gram's continuation where it has one. */
    sp->n_plain = n_plain;
    sp->optimistic = true;
    const bool draft_open = gate_open(sp, n, SRC_DRAFT);
    if (!draft_open)
        for (int32_t i = 0; i < n; i++)
            if (sp->src[i] == SRC_DRAFT && sp->alt[i] > 0) {
                sp->src[i] = SRC_NGRAM;
                sp->cap[i] = sp->alt[i];
                sp->catchup[i] = 0;
            }
    const bool ngram_open = gate_open(sp, n, SRC_NGRAM);
    sp->optimistic = false;
    sp->n_plain = 0;
    /* gate_open leaves k[] at 0 where its proposer has candidates, and optimize()
     * starts from 0: this reset matters only where neither proposer has any */
    for (int32_t i = 0; i < n; i++) sp->k[i] = 0;
    if (!draft_open && !ngram_open) return;
    const int32_t shown = draft_open && ngram_open ? 0 : draft_open ? SRC_DRAFT : SRC_NGRAM;
    hide_others(sp, n, shown, true);
    optimize(sp, n, true);
    hide_others(sp, n, shown, false);
}

/* ---- proposing ------------------------------------------------------------------------- */

/* The proposer of a sequence that has both this step (an n-gram continuation of m tokens,
 * the draft model up to cap): the one whose best k promises more tokens per ms, each
 * priced as if this sequence alone speculated beside n_other plain decodes, the draft's
 * rounds and catch-up included. A proposer not yet measured counts at SPEC_PRIOR; a tie
 * goes to the n-gram, which costs no forward. */
static int32_t pick_source(const spec_state *sp, const sequence *s, int32_t m, int32_t cap,
                           int32_t n_other, int32_t need, double catchup) {
    double best[2] = {0, 0};
    for (int p = 0; p < 2; p++) {
        const double a = alpha_of(sp, s, SRC_OF[p]);
        double dms = 0;
        for (int32_t k = 1; k <= (p ? cap : m); k++) {
            const double ex = expected_tokens(a, k);
            if (p) dms += cost_at(sp->dcost_n, sp->dcost_ms, sp->n_dcost, k == 1 ? need : 1);
            const double r = tokens_per_ms(sp, n_other + ex, n_other + 1 + k, p ? dms + catchup * ex : 0);
            if (r > best[p]) best[p] = r;
        }
    }
    return best[1] > best[0] ? SRC_DRAFT : SRC_NGRAM;
}

/* The draft's token from its logits row: the request's greedy pick (penalties, bias, bans). */
static int32_t draft_pick(inferd_engine *e, sequence *s, const float *row) {
    sampler_params gp = s->req->sparams;
    gp.temperature = 0.0f;
    const sampler_state *st = s->samp.count ? &s->samp : NULL;
    return sampler_sample_at(&gp, st, row, e->n_vocab, 0, 0, &e->scratch);
}

/* Whether the draft gives its pick id less than p_min probability (the softmax of its
 * row over the n ids it computes; p_min 0: never). Such a draft is seldom accepted, and
 * the drafts after it still less: on the 1.5B / 0.5B Qwen pair, drafts below 0.2 were
 * accepted 2-13% of the time, against 74-91% overall (docs/speculative.md). */
static bool draft_unsure(const float *row, int32_t n, int32_t id, float p_min) {
    if (!(p_min > 0) || id < 0 || id >= n) return false;
    return (double)row[id] - logprobs_logsumexp(row, n) < log((double)p_min);
}

/* The draft model's rounds for the candidates with src 2 and k > 0; each ends with
 * k set to the drafts it got (written after its known tokens), and got[] the rounds it
 * took part in. A later draft the draft model is unsure of (draft_unsure) ends the
 * candidate's rounds and is not proposed. The first is always proposed: every
 * speculating step then verifies something, so the acceptance goes on being measured
 * (had unsure first drafts been dropped, a sequence whose drafts all are would pay a
 * round every step and never be measured; counted as misses instead, they switched
 * prose answers off at their hard start: -9% tok/s, measured). Returns whether the
 * first round fed no more than the cost model's need (no catch-up). */
static bool run_draft(inferd_engine *e, int32_t n) {
    spec_state *sp = &e->spec;
    draft *d = sp->d;
    draft_job *jobs = sp->jobs;
    int32_t *who = sp->who, *got = sp->got; /* a job's candidate; a candidate's drafts so far */
    for (int32_t i = 0; i < n; i++) got[i] = 0;
    int32_t nj = 0, left = d->max_tokens, L = 0;
    bool steady = true;
    for (int32_t i = 0; i < n; i++) {
        if (sp->src[i] != SRC_DRAFT || sp->k[i] == 0) continue;
        sched_seq *q = sp->cand[i];
        sequence *s = seq_of(q);
        draft_seq *ds = &s->dseq;
        if (draft_seq_prepare(d, ds) != IFD_OK || left <= 0) {
            sp->k[i] = 0;
            continue;
        }
        if (ds->kv.n_tokens == 0) draft_seq_match(d, ds, q->tokens, q->n_tokens);
        draft_seq_rollback(d, ds, q->tokens, q->n_tokens);
        const int32_t need = q->n_tokens - ds->n_computed;
        const int32_t feed = IFD_MIN(need, left);
        if (feed < 1) {
            sp->k[i] = 0;
            continue;
        }
        left -= feed;
        steady &= need <= sp->need[i];
        jobs[nj] = (draft_job){.ds = ds, .tokens = q->tokens, .n_feed = feed, .want_logits = feed == need};
        if (feed < need) sp->k[i] = 0; /* catching up over several steps: no drafts yet */
        who[nj++] = i;
    }
    if (nj == 0) return steady;
    int rc = draft_run(d, jobs, nj);
    sp->cnt.spec_draft_forwards++;
    bool short_of_blocks = false;
    for (int32_t j = 0; j < nj; j++) short_of_blocks |= rc == IFD_OK && jobs[j].failed;
    if (short_of_blocks) {
        /* the draft's pool is full: the waiting (preempted) sequences give theirs back
         * (they catch up again when they run), so the running ones get blocks next step */
        for (sched_seq *q = e->sch.waiting.head; q; q = q->next) draft_seq_clear(d, &seq_of(q)->dseq);
    }
    for (int32_t j = 0; j < nj; j++) {
        const int32_t i = who[j];
        sched_seq *q = sp->cand[i];
        sequence *s = seq_of(q);
        if (rc != IFD_OK || jobs[j].failed) {
            draft_seq_clear(d, &s->dseq); /* room for the others; it starts over later */
            sp->k[i] = 0;
            continue;
        }
        s->dseq.n_verified = s->dseq.n_computed; /* known tokens only so far */
        if (jobs[j].row < 0 || sp->k[i] == 0) {
            sp->k[i] = 0;
            continue;
        }
        q->tokens[q->n_tokens] = draft_pick(e, s, draft_logits(d, jobs[j].row));
        got[i] = 1;
        L = IFD_MAX(L, sp->k[i]);
    }
    for (int32_t r = 1; r < L && rc == IFD_OK; r++) {
        nj = 0;
        for (int32_t i = 0; i < n; i++) {
            if (got[i] != r || sp->k[i] <= r) continue;
            sched_seq *q = sp->cand[i];
            jobs[nj] = (draft_job){.ds = &seq_of(q)->dseq, .tokens = q->tokens, .n_feed = 1, .want_logits = true};
            who[nj++] = i;
        }
        if (nj == 0) break;
        rc = draft_run(d, jobs, nj);
        sp->cnt.spec_draft_forwards++;
        for (int32_t j = 0; j < nj; j++) {
            const int32_t i = who[j];
            sched_seq *q = sp->cand[i];
            if (rc != IFD_OK || jobs[j].failed) continue; /* keeps the r drafts it has */
            const float *row = draft_logits(d, jobs[j].row);
            q->tokens[q->n_tokens + r] = draft_pick(e, seq_of(q), row);
            got[i]++;
            if (draft_unsure(row, sp->d_rows, q->tokens[q->n_tokens + r], sp->p_min)) {
                sp->cnt.spec_draft_unsure++;
                sp->k[i] = r; /* no later round: k <= r below */
            }
        }
    }
    for (int32_t i = 0; i < n; i++)
        if (sp->src[i] == SRC_DRAFT) sp->k[i] = IFD_MIN(sp->k[i], got[i]);
    return steady;
}

/* Whether proposer src rests (see pool()): its sequences still learning do not probe. */
static bool resting(const spec_state *sp, int32_t src) {
    return sp->decodes < sp->rest_until[prop_ix(src)];
}

/* Halves the pool of proposer index p (a window, and at the start of a rest). */
static void halve_pool(spec_state *sp, int p) {
    sp->pool_acc[p] *= 0.5;
    sp->pool_obs[p] *= 0.5;
}

/* A probe of proposer src (a drafts accepted of obs observed, by a sequence still
 * learning) into the pool of all sequences' probes. Where the pool holds SPEC_POOL_MIN
 * and its acceptance is below min_acceptance, the proposer rests for rest_len decoding
 * sequence-steps (SPEC_REST, doubling while it comes back as low): each probe episode
 * costs a draft catch-up and some 6 verifications that a proposer which almost never
 * agrees does not repay (on the EPYC, --draft-vocab 300: ~4 decodes an episode, two per
 * 128-token answer). The pool keeps half its evidence when a rest starts, so one more
 * episode after it decides. */
static void pool(spec_state *sp, int32_t src, int32_t a, int32_t obs) {
    const int p = prop_ix(src);
    sp->pool_acc[p] += a;
    sp->pool_obs[p] += obs;
    if (sp->pool_obs[p] > SPEC_POOL_MAX) halve_pool(sp, p);
    if (sp->pool_obs[p] < SPEC_POOL_MIN || resting(sp, src)) return;
    if (sp->pool_acc[p] >= sp->min_acceptance * sp->pool_obs[p]) {
        sp->rest_len[p] = 0; /* it pays again: a later rest starts short */
        return;
    }
    sp->rest_len[p] = sp->rest_len[p] ? IFD_MIN(2 * sp->rest_len[p], SPEC_REST_MAX) : SPEC_REST;
    sp->rest_until[p] = sp->decodes + (uint64_t)sp->rest_len[p];
    halve_pool(sp, p);
    sp->cnt.spec_rests++;
}

int spec_propose(inferd_engine *e) {
    spec_state *sp = &e->spec;
    if (!sp->on) return IFD_OK;
    int32_t n = 0;
    /* the load the batch is about to have (see choose_k) */
    const int32_t load = IFD_MIN(e->sch.running.n + e->sch.waiting.n, e->opt.max_num_seqs);
    const int32_t n_other = IFD_MAX(0, load - 1);
    for (sched_seq *q = e->sch.running.head; q && n < e->opt.max_num_seqs; q = q->next) {
        if (q->n_spec || q->n_tokens - q->n_computed != 1) continue;
        sequence *s = seq_of(q);
        int32_t cap = IFD_MIN(sp->K, s->max_tokens - s->n_generated - 1);
        cap = IFD_MAX(IFD_MIN(cap, e->max_model_len - q->n_tokens - 1), 0);
        int32_t c[2] = {sp->ngram ? cap : 0, sp->d ? cap : 0}; /* per proposer */
        sp->decodes++;
        for (int p = 0; p < 2; p++)
            if (s->spec_retry_at[p] > 0) {
                if (s->n_generated >= s->spec_retry_at[p]) {
                    s->spec_retry_at[p] = 0;
                    s->spec_obs[p] = 0;
                } else {
                    c[p] = 0;
                }
            }
        for (int p = 0; p < 2; p++) /* a resting proposer: no probes */
            if (resting(sp, SRC_OF[p]) && learning(s, SRC_OF[p])) c[p] = 0;
        if (c[0] > 0)
            c[0] = spec_ngram_propose(q->tokens, q->n_tokens, sp->ngram_min, sp->ngram_max, c[0],
                                      sp->ngram_buf + (size_t)n * sp->K);
        /* the draft's first round feeds what it has not seen: in steady state the last
         * accepted draft and the bonus token; a longer catch-up (the prompt) is a
         * one-time cost, spread over the tokens left by rate() */
        const draft_seq *ds = &s->dseq;
        const int32_t lag = q->n_tokens - (ds->ready ? ds->n_verified : 0);
        sp->need[n] = IFD_MIN(2, IFD_MAX(1, lag));
        const double catchup = lag > 2 ? cost_at(sp->dcost_n, sp->dcost_ms, sp->n_dcost, lag) /
                                             IFD_MAX(1, s->max_tokens - s->n_generated)
                                       : 0;
        const int32_t src = c[0] > 0 && c[1] > 0 ? pick_source(sp, s, c[0], c[1], n_other, sp->need[n], catchup)
                            : c[0] > 0           ? SRC_NGRAM
                            : c[1] > 0           ? SRC_DRAFT
                                                 : 0;
        cap = src ? c[prop_ix(src)] : 0;
        sp->alt[n] = src == SRC_DRAFT ? c[prop_ix(SRC_NGRAM)] : 0;
        sp->catchup[n] = src == SRC_DRAFT ? catchup : 0;
        sp->cand[n] = q;
        sp->cap[n] = cap;
        sp->src[n] = src;
        n++;
    }
    if (n == 0) return IFD_OK;
    choose_k(sp, n, load - n);
    for (int32_t i = 0; i < n; i++) {
        /* a measured sequence the choice leaves plain is measured again after a while
         * (where the gate lets it probe): its acceptance was learnt on other text (an
         * answer's first tokens are often the hardest), and nothing else would ever
         * measure it again */
        sequence *s = seq_of(sp->cand[i]);
        if (sp->src[i] == 0) { /* nothing to propose: not a choice left plain */
            s->spec_idle[0] = s->spec_idle[1] = 0;
            continue;
        }
        const int p = prop_ix(sp->src[i]);
        if (sp->k[i] > 0 || sp->cap[i] == 0 || learning(s, sp->src[i])) {
            s->spec_idle[p] = 0;
        } else if (++s->spec_idle[p] >= IFD_MAX(s->spec_idle_max[p], SPEC_IDLE)) {
            s->spec_obs[p] = 0; /* the prior again */
            sp->cnt.spec_remeasured++;
            s->spec_idle[p] = 0;
            s->spec_idle_max[p] = IFD_MIN(2 * IFD_MAX(s->spec_idle_max[p], SPEC_IDLE), SPEC_RETRY_MAX);
        }
    }
    if (sp->d) {
        /* the draft's measured time against the model's: a correction factor, learnt
         * from steady rounds only (a catch-up is the one-time cost the model leaves out) */
        const double t0 = ifd_now_s();
        const uint64_t f0 = sp->cnt.spec_draft_forwards;
        const bool steady = run_draft(e, n);
        const double ms = (ifd_now_s() - t0) * 1e3, pred = draft_ms(sp, n, sp->got); /* the rounds run */
        if (sp->cnt.spec_draft_forwards != f0) sp->cnt.spec_draft_ms += ms; /* none ran: no time */
        if (pred > 0 && steady && !sp->debug_costs)
            sp->f_draft = 0.9 * sp->f_draft + 0.1 * IFD_MIN(4.0, IFD_MAX(0.25, ms / pred));
    }
    for (int32_t i = 0; i < n; i++) {
        sched_seq *q = sp->cand[i];
        int32_t k = sp->k[i];
        if (k > 0 && sp->src[i] == SRC_NGRAM)
            memcpy(q->tokens + q->n_tokens, sp->ngram_buf + (size_t)i * sp->K, (size_t)k * sizeof(int32_t));
        /* constrained decoding: the drafts end at the first one the grammar refuses */
        const request *r = seq_of(q)->req;
        if (k > 0 && r->gram && seq_of(q)->g.mode == GMODE_WAIT) k = 0; /* decided by its first draw */
        if (k > 0 && r->gram && seq_of(q)->g.mode == GMODE_ACTIVE) {
            gram_state st = seq_of(q)->gstate;
            int32_t ok = 0;
            while (ok < k && !gram_vocab_is_eog(e->gvocab, q->tokens[q->n_tokens + ok]) &&
                   (st = gram_advance_token(r->gram, e->gvocab, st, q->tokens[q->n_tokens + ok])) != GRAM_DEAD)
                ok++;
            k = ok;
        }
        sp->cnt.spec_k_hist[IFD_MIN(k, 16)]++;
        seq_of(q)->spec_src = k > 0 ? sp->src[i] : 0;
        if (k == 0) continue;
        q->n_tokens += k;
        q->n_spec = k;
    }
    return IFD_OK;
}

void spec_observe_step(inferd_engine *e, int32_t n_tokens, int32_t n_logits, double ms) {
    spec_state *sp = &e->spec;
    if (!sp->on || sp->n_cost == 0 || n_tokens < 1 || sp->debug_costs) return;
    const double pred = cost_at(sp->cost_n, sp->cost_ms, sp->n_cost, n_tokens);
    if (pred > 0) sp->f_fwd = 0.9 * sp->f_fwd + 0.1 * IFD_MIN(4.0, IFD_MAX(0.25, ms / pred));
    /* a step with prefill tokens (no logits row for most) is not the shape rate() prices */
    if (n_logits == n_tokens) observe_size(sp, n_tokens, ms);
}

void spec_observe(inferd_engine *e, sequence *s, int32_t k, int32_t a) {
    spec_state *sp = &e->spec;
    sp->cnt.spec_verifications++;
    sp->cnt.spec_proposed += (uint64_t)k;
    sp->cnt.spec_accepted += (uint64_t)a;
    sp->cnt.spec_emitted += (uint64_t)a + 1;
    s->spec_proposed += k;
    s->spec_accepted += a;
    /* the proposer of these drafts (spec_propose set spec_src for every k > 0) */
    const int32_t src = s->spec_src == SRC_NGRAM ? SRC_NGRAM : SRC_DRAFT;
    const int p = prop_ix(src);
    if (src == SRC_NGRAM) {
        sp->cnt.spec_ngram_proposed += (uint64_t)k;
        sp->cnt.spec_ngram_accepted += (uint64_t)a;
    }
    const int32_t obs = a + (a < k); /* the accepted drafts and the first rejected one */
    if (sp->adaptive && learning(s, src)) pool(sp, src, a, obs);
    float al = alpha_of(sp, s, src);
    for (int32_t j = 0; j < a; j++) al += SPEC_EMA * (1.0f - al);
    if (a < k) al *= 1.0f - SPEC_EMA;
    s->spec_alpha[p] = al;
    s->spec_obs[p] += obs;
    if (sp->adaptive && !learning(s, src) && al < sp->min_acceptance) {
        s->spec_backoff[p] = s->spec_backoff[p] ? IFD_MIN(2 * s->spec_backoff[p], SPEC_RETRY_MAX) : SPEC_RETRY;
        s->spec_retry_at[p] = s->n_generated + a + 1 + s->spec_backoff[p];
        sp->cnt.spec_switched_off++;
    }
    if (sp->d && s->spec_src == SRC_DRAFT) {
        draft_seq *ds = &s->dseq;
        ds->n_verified = IFD_MAX(ds->n_verified, IFD_MIN(ds->n_computed, s->ss.n_computed));
        draft_seq_rollback(sp->d, ds, s->ss.tokens, s->ss.n_computed);
    }
    s->spec_src = 0;
}

void engine_spec_debug_costs(inferd_engine *e, const double *n, const double *ms, int32_t cnt, const double *dn,
                             const double *dms, int32_t dcnt) {
    spec_state *sp = &e->spec;
    sp->n_cost = IFD_MIN(IFD_MAX(cnt, 0), 24);
    sp->n_dcost = IFD_MIN(IFD_MAX(dcnt, 0), 24);
    memcpy(sp->cost_n, n, (size_t)sp->n_cost * sizeof(double));
    memcpy(sp->cost_ms, ms, (size_t)sp->n_cost * sizeof(double));
    memcpy(sp->dcost_n, dn, (size_t)sp->n_dcost * sizeof(double));
    memcpy(sp->dcost_ms, dms, (size_t)sp->n_dcost * sizeof(double));
    sp->f_fwd = sp->f_draft = 1.0;
    sp->debug_costs = true;
}

void engine_spec_debug_observe(inferd_engine *e, int32_t n_tokens, double ms) {
    observe_size(&e->spec, n_tokens, ms);
}
