/* test_ops_ref.c — properties of the reference ops that the rest of the project
 * leans on: paged attention is independent of block placement, RoPE layouts rotate
 * the right pairs and preserve norms, rmsnorm/swiglu match their definitions. */
#include "backend/cpu/ops.h"
#include "test_util.h"

static float frand(unsigned *s) {
    *s = *s * 1103515245u + 12345u;
    return ((float)((*s >> 8) & 0xffff) / 65535.0f) * 2.0f - 1.0f;
}

static void test_rmsnorm_swiglu(void) {
    float x[4] = {1, -2, 3, -4}, w[4] = {1, 0.5f, 2, 1}, out[4];
    op_rmsnorm_ref(out, x, w, 4, 0.0f);
    const float r = 1.0f / sqrtf((1 + 4 + 9 + 16) / 4.0f);
    for (int i = 0; i < 4; i++) CHECK(fabsf(out[i] - x[i] * r * w[i]) < 1e-6f);
    float g[3] = {0, 1, -1}, u[3] = {2, 3, 4}, o[3];
    op_swiglu_ref(o, g, u, 3);
    CHECK(o[0] == 0.0f);
    CHECK(fabsf(o[1] - 3.0f / (1.0f + expf(-1.0f))) < 1e-6f);
    CHECK(fabsf(o[2] - 4.0f * -1.0f / (1.0f + expf(1.0f))) < 1e-6f);
}

static void test_rope_layouts(void) {
    enum { HD = 8 };
    float a[HD], b[HD];
    for (int i = 0; i < HD; i++) a[i] = b[i] = (float)(i + 1);
    rope_params rn = {.head_dim = HD, .n_rot = HD, .layout = ROPE_NORM, .base = 10000.0f,
                      .freq_scale = 1.0f};
    rope_params rx = rn;
    rx.layout = ROPE_NEOX;
    op_rope_ref(a, 1, 3, &rn);
    op_rope_ref(b, 1, 3, &rx);
    /* pair 0 has theta = pos: normal rotates (x0, x1), neox rotates (x0, x4) */
    CHECK(fabsf(a[0] - (1 * cosf(3) - 2 * sinf(3))) < 1e-5f);
    CHECK(fabsf(a[1] - (1 * sinf(3) + 2 * cosf(3))) < 1e-5f);
    CHECK(fabsf(b[0] - (1 * cosf(3) - 5 * sinf(3))) < 1e-5f);
    CHECK(fabsf(b[4] - (1 * sinf(3) + 5 * cosf(3))) < 1e-5f);
    /* position 0 is the identity; linear scaling by 2 at pos 6 == pos 3 */
    float c[HD], d[HD];
    for (int i = 0; i < HD; i++) c[i] = d[i] = (float)(i + 1);
    op_rope_ref(c, 1, 0, &rn);
    for (int i = 0; i < HD; i++) CHECK(c[i] == (float)(i + 1));
    rope_params rs = rn;
    rs.freq_scale = 0.5f;
    op_rope_ref(d, 1, 6, &rs);
    for (int i = 0; i < HD; i++) CHECK(fabsf(d[i] - a[i]) < 1e-4f);
}

/* Attention through a scrambled block table equals attention through the identity. */
static void test_attention_paging(void) {
    enum { NKV = 2, NH = 4, HD = 16, BS = 4, NB = 8, NPOS = 27 };
    static float k1[NB * BS * NKV * HD], v1[NB * BS * NKV * HD];
    static float k2[NB * BS * NKV * HD], v2[NB * BS * NKV * HD];
    static float q[NPOS * NH * HD], o1[NPOS * NH * HD], o2[NPOS * NH * HD], scratch[NB * BS];
    unsigned s = 3;
    int32_t ident[NB], perm[NB] = {5, 2, 7, 0, 3, 6, 1, 4}, pos[NPOS];
    for (int i = 0; i < NB; i++) ident[i] = i;
    for (int p = 0; p < NPOS; p++) {
        pos[p] = p;
        for (int j = 0; j < NKV * HD; j++) {
            float kv = frand(&s), vv = frand(&s);
            int slot1 = p, slot2 = perm[p / BS] * BS + p % BS;
            k1[slot1 * NKV * HD + j] = kv;
            v1[slot1 * NKV * HD + j] = vv;
            k2[slot2 * NKV * HD + j] = kv;
            v2[slot2 * NKV * HD + j] = vv;
        }
    }
    for (int i = 0; i < NPOS * NH * HD; i++) q[i] = frand(&s);
    kv_view a = {k1, v1, NKV, HD, BS, BACKEND_KV_F32, 0}, b = {k2, v2, NKV, HD, BS, BACKEND_KV_F32, 0};
    op_attention_ref(o1, q, NPOS, pos, NH, &a, ident, scratch);
    op_attention_ref(o2, q, NPOS, pos, NH, &b, perm, scratch);
    CHECK(memcmp(o1, o2, sizeof o1) == 0);
    /* position 0 attends only to itself: output == v[0] of its kv head */
    for (int h = 0; h < NH; h++)
        for (int d = 0; d < HD; d++) CHECK(fabsf(o1[h * HD + d] - v1[(h / 2) * HD + d]) < 1e-6f);
}

TEST_MAIN(T(test_rmsnorm_swiglu), T(test_rope_layouts), T(test_attention_paging))
