/* test_config_cmds.c — the one option table as serve, generate, bench and perplexity see it
 * (src/server/config.c): shared engine entries under the same names, per-command
 * entries and defaults, repeatable and range options, what was given, the engine
 * options it maps to, and --help printed from the table. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/config.h"
#include "util/common.h"
#include "test_util.h"

static int load(server_config *c, cfg_cmd cmd, char **argv, int argc, char *err) {
    config_init(c, cmd);
    return config_load(c, argc, argv, err, 256);
}

static void test_shared_engine_options(void) {
    /* the same flags set the same engine options in all four commands */
    const cfg_cmd cmds[] = {CFG_CMD_SERVE, CFG_CMD_GENERATE, CFG_CMD_BENCH, CFG_CMD_PERPLEXITY};
    for (int i = 0; i < 4; i++) {
        server_config c;
        char err[256] = "";
        char *argv[] = {"x", "-m", "m.gguf", "-t", "3", "--max-num-seqs", "5", "--max-num-batched-tokens=77",
                        "--kv-cache-memory", "1M", "--block-size", "32", "--max-model-len", "128",
                        "--no-enable-prefix-caching", "--reference-kernels", "--max-step-ms", "12.5",
                        "--kv-cache-dtype", i % 2 ? "int8" : "fp8"};
        CHECKF(load(&c, cmds[i], argv, (int)IFD_ARRAY_LEN(argv), err) == 0, "cmd %d: %s", i, err);
        inferd_engine_options o;
        memset(&o, 0, sizeof o);
        o.threaded = true;
        config_engine_options(&c, &o);
        CHECK(o.model_path && !strcmp(o.model_path, "m.gguf") && o.n_threads == 3 && o.max_num_seqs == 5);
        CHECK(o.max_num_batched_tokens == 77 && o.kv_cache_bytes == 1 << 20 && o.block_size == 32);
        CHECK(o.max_model_len == 128 && !o.enable_prefix_caching && o.reference_kernels);
        CHECK(o.max_step_ms == 12.5 && o.threaded); /* threaded is the caller's */
        CHECK(o.kv_cache_dtype && !strcmp(o.kv_cache_dtype, i % 2 ? "int8" : "fp8"));
        CHECK(config_given(&c, "max-num-seqs") && !config_given(&c, "kv-cache-fraction"));
        server_config_deinit(&c);
    }
}

/* --kv-cache-dtype: auto by default, every listed name, nothing else */
static void test_kv_cache_dtype(void) {
    const char *names[] = {"auto", "f32", "f16", "bf16", "int8", "fp8"};
    for (size_t i = 0; i <= IFD_ARRAY_LEN(names); i++) {
        server_config c;
        char err[256] = "";
        char *argv[] = {"x", "--kv-cache-dtype", (char *)(i ? names[i - 1] : "auto")};
        CHECKF(load(&c, CFG_CMD_PERPLEXITY, argv, i ? 3 : 1, err) == 0, "%s", err);
        inferd_engine_options o;
        memset(&o, 0, sizeof o);
        config_engine_options(&c, &o);
        CHECK(o.kv_cache_dtype && !strcmp(o.kv_cache_dtype, i ? names[i - 1] : "auto"));
        server_config_deinit(&c);
    }
    server_config c;
    char err[256] = "";
    char *bad[] = {"x", "--kv-cache-dtype", "q4_0"};
    CHECK(load(&c, CFG_CMD_GENERATE, bad, 3, err) != 0);
    CHECKF(strstr(err, "kv-cache-dtype") != NULL, "%s", err);
    server_config_deinit(&c);
}

static void test_command_options(void) {
    server_config c;
    char err[256] = "";
    /* generate's defaults over the table's */
    config_init(&c, CFG_CMD_GENERATE);
    CHECK(c.max_num_seqs == 1 && c.kv_cache_fraction == 0.05 && c.n_predict == 128 && c.temp == 0.8);
    server_config_deinit(&c);
    config_init(&c, CFG_CMD_SERVE);
    CHECK(c.max_num_seqs == 64 && c.kv_cache_fraction == 0.25);
    server_config_deinit(&c);
    /* a command's own options belong to it alone */
    char *port[] = {"generate", "--port", "1"};
    CHECK(load(&c, CFG_CMD_GENERATE, port, 3, err) < 0 && strstr(err, "--port"));
    server_config_deinit(&c);
    char *temp[] = {"serve", "--temp", "0"};
    CHECK(load(&c, CFG_CMD_SERVE, temp, 3, err) < 0 && strstr(err, "--temp"));
    server_config_deinit(&c);
    char *ranges[] = {"bench", "--input-len-range", "64:512"};
    CHECK(load(&c, CFG_CMD_GENERATE, ranges, 3, err) < 0);
    server_config_deinit(&c);
    /* the old spellings are gone */
    char *old[] = {"bench", "--reference"};
    CHECK(load(&c, CFG_CMD_BENCH, old, 2, err) < 0);
    server_config_deinit(&c);
    char *old2[] = {"bench", "--no-prefix-caching"};
    CHECK(load(&c, CFG_CMD_BENCH, old2, 2, err) < 0);
    server_config_deinit(&c);
}

static void test_generate_options(void) {
    server_config c;
    char err[256] = "";
    char *argv[] = {"generate", "-m", "m", "-p", "ROMEO:", "-n", "0", "--temp", "0", "--stop", "a", "--stop=b c",
                    "--seed", "18446744073709551615", "--ids", "-v", "--top-k", "7", "--repeat-penalty", "1.1"};
    CHECKF(load(&c, CFG_CMD_GENERATE, argv, (int)IFD_ARRAY_LEN(argv), err) == 0, "%s", err);
    CHECK(!strcmp(c.prompt, "ROMEO:") && c.n_predict == 0 && c.temp == 0 && c.top_k == 7);
    CHECK(c.stop.n == 2 && !strcmp(c.stop.v[0], "a") && !strcmp(c.stop.v[1], "b c"));
    CHECK(c.seed == UINT64_MAX && config_given(&c, "seed")); /* exact, not through a double */
    CHECK(c.print_ids && c.verbose && c.repeat_penalty == 1.1);
    server_config_deinit(&c);
    config_init(&c, CFG_CMD_GENERATE);
    CHECK(!config_given(&c, "seed")); /* generate seeds from the clock then */
    server_config_deinit(&c);
    char *bad[][3] = {{"g", "--stop", ""}, {"g", "--seed", "-1"}, {"g", "--temp", "101"}, {"g", "--top-k", "1.5"},
                      {"g", "-n", "x"}};
    for (size_t i = 0; i < IFD_ARRAY_LEN(bad); i++) {
        CHECKF(load(&c, CFG_CMD_GENERATE, bad[i], 3, err) < 0, "%s %s", bad[i][1], bad[i][2]);
        server_config_deinit(&c);
    }
    /* at most CFG_MAX_LIST stop strings */
    char *many[2 + 2 * (CFG_MAX_LIST + 1)];
    int n = 0;
    many[n++] = "g";
    for (int i = 0; i <= CFG_MAX_LIST; i++) many[n++] = "--stop", many[n++] = "s";
    CHECK(load(&c, CFG_CMD_GENERATE, many, n, err) < 0 && strstr(err, "--stop"));
    server_config_deinit(&c);
}

static void test_bench_options(void) {
    server_config c;
    char err[256] = "";
    config_init(&c, CFG_CMD_BENCH);
    CHECK(c.num_requests == 64 && c.input_len[0] == 64 && c.input_len[1] == 512 && c.output_len[1] == 256);
    CHECK(c.seed == 0 && c.scenario == 0);
    server_config_deinit(&c);
    char *argv[] = {"bench", "--input-len-range", "8", "--output-len-range", "1:16", "--scenario", "chunked",
                    "--request-rate", "0.5", "--num-requests", "3"};
    CHECKF(load(&c, CFG_CMD_BENCH, argv, (int)IFD_ARRAY_LEN(argv), err) == 0, "%s", err);
    CHECK(c.input_len[0] == 8 && c.input_len[1] == 8 && c.output_len[0] == 1 && c.output_len[1] == 16);
    CHECK(c.scenario == 1 && c.request_rate == 0.5 && c.num_requests == 3);
    server_config_deinit(&c);
    const char *bad[] = {"9:8", "0:4", "4:", ":4", "a:b", "1:2:3", "4 ", ""};
    for (size_t i = 0; i < IFD_ARRAY_LEN(bad); i++) {
        char *av[] = {"bench", "--input-len-range", (char *)bad[i]};
        CHECKF(load(&c, CFG_CMD_BENCH, av, 3, err) < 0, "'%s'", bad[i]);
        server_config_deinit(&c);
    }
    char *sc[] = {"bench", "--scenario", "online"};
    CHECK(load(&c, CFG_CMD_BENCH, sc, 3, err) < 0);
    server_config_deinit(&c);
}

static void test_perplexity_options(void) {
    server_config c;
    char err[256] = "";
    config_init(&c, CFG_CMD_PERPLEXITY);
    /* its defaults over the table's: big steps (prompts only), no prefix cache */
    CHECK(c.ppl_ctx == 512 && !c.text_file && !c.kl_base);
    CHECK(c.max_num_batched_tokens == 2048 && !c.enable_prefix_caching && c.max_num_seqs == 64);
    server_config_deinit(&c);
    char *argv[] = {"perplexity", "-m", "a.gguf", "-f", "t.txt", "-c", "256", "--kl-base", "b.gguf"};
    CHECKF(load(&c, CFG_CMD_PERPLEXITY, argv, (int)IFD_ARRAY_LEN(argv), err) == 0, "%s", err);
    CHECK(!strcmp(c.text_file, "t.txt") && c.ppl_ctx == 256 && !strcmp(c.kl_base, "b.gguf"));
    CHECK(config_given(&c, "ctx") && config_given(&c, "file"));
    server_config_deinit(&c);
    CHECK(load(&c, CFG_CMD_PERPLEXITY, (char *[]){"x", "--ctx", "-1"}, 3, err) < 0 && strstr(err, "--ctx"));
    server_config_deinit(&c);
    /* perplexity's entries are its own */
    CHECK(load(&c, CFG_CMD_GENERATE, (char *[]){"x", "--kl-base", "b.gguf"}, 3, err) < 0);
    server_config_deinit(&c);
    CHECK(load(&c, CFG_CMD_PERPLEXITY, (char *[]){"x", "--prompt", "hi"}, 3, err) < 0);
    server_config_deinit(&c);
}

static void test_env_and_file_are_serve_only(void) {
    setenv("INFERD_MAX_NUM_SEQS", "9", 1);
    server_config c;
    char err[256] = "";
    char *argv[] = {"x"};
    CHECK(load(&c, CFG_CMD_BENCH, argv, 1, err) == 0 && c.max_num_seqs == 64);
    server_config_deinit(&c);
    CHECK(load(&c, CFG_CMD_SERVE, argv, 1, err) == 0 && c.max_num_seqs == 9);
    server_config_deinit(&c);
    unsetenv("INFERD_MAX_NUM_SEQS");
    char *cfg[] = {"generate", "--config", "x.json"};
    CHECK(load(&c, CFG_CMD_GENERATE, cfg, 3, err) < 0 && strstr(err, "--config"));
    server_config_deinit(&c);
}

/* --help of each command lists the engine options with the same lines (bar the
 * defaults a command sets and serve's environment names) and its own options */
static char *help_of(cfg_cmd cmd) {
    char *buf = NULL;
    size_t n = 0;
    FILE *fp = open_memstream(&buf, &n);
    config_help(cmd, fp);
    fclose(fp);
    return buf;
}

static void test_help(void) {
    char *s = help_of(CFG_CMD_SERVE), *g = help_of(CFG_CMD_GENERATE), *b = help_of(CFG_CMD_BENCH),
         *p = help_of(CFG_CMD_PERPLEXITY);
    const char *engine[] = {"--model STR", "--threads N", "--max-num-seqs N", "--max-num-batched-tokens N",
                            "--kv-cache-memory BYTES", "--kv-cache-fraction X", "--block-size N",
                            "--max-model-len N", "--enable-prefix-caching", "--reference-kernels", "--max-step-ms X",
                            "--device MODE", "--gpu-memory-utilization X", "--random-weights MODE",
                            "--dtype MODE", "noise"};
    for (size_t i = 0; i < IFD_ARRAY_LEN(engine); i++)
        CHECKF(strstr(s, engine[i]) && strstr(g, engine[i]) && strstr(b, engine[i]) && strstr(p, engine[i]),
               "%s", engine[i]);
    CHECK(strstr(p, "-f, --file STR") && strstr(p, "-c, --ctx N") && strstr(p, "--kl-base STR") &&
          !strstr(p, "--temp") && !strstr(s, "--kl-base"));
    CHECK(strstr(g, "--prompt STR") && strstr(g, "--n-predict N") && strstr(g, "--stop STR") && !strstr(g, "--port"));
    CHECK(strstr(b, "--input-len-range A:B") && strstr(b, "[offline|chunked]") && !strstr(b, "--temp"));
    CHECK(strstr(s, "--port N") && strstr(s, "{INFERD_PORT}") && !strstr(g, "{INFERD_") && !strstr(s, "--prompt"));
    CHECK(strstr(g, "--max-num-seqs N              sequences running at once (default 1)"));
    CHECK(strstr(s, "--max-num-seqs N              sequences running at once (default 64)"));
    free(s);
    free(g);
    free(b);
    free(p);
}

/* --device and --gpu-memory-utilization: in every command, into the engine options,
 * bad values refused with a message naming the option and what it takes */
static void test_device_options(void) {
    const cfg_cmd cmds[] = {CFG_CMD_SERVE, CFG_CMD_GENERATE, CFG_CMD_BENCH};
    const char *names[] = {"auto", "cuda", "cpu", "emu"};
    const inferd_device want[] = {INFERD_DEVICE_AUTO, INFERD_DEVICE_CUDA, INFERD_DEVICE_CPU,
                                  INFERD_DEVICE_EMU};
    for (int i = 0; i < 3; i++) {
        server_config c;
        char err[256] = "";
        inferd_engine_options o;
        /* defaults: auto, 0.90 */
        CHECK(load(&c, cmds[i], (char *[]){"x"}, 1, err) == 0);
        inferd_engine_options_default(&o);
        o.device = INFERD_DEVICE_EMU;
        o.gpu_memory_utilization = 0.5;
        config_engine_options(&c, &o);
        CHECK(o.device == INFERD_DEVICE_AUTO && o.gpu_memory_utilization == 0.90);
        server_config_deinit(&c);
        for (int d = 0; d < 4; d++) {
            char *argv[] = {"x", "--device", (char *)names[d], "--gpu-memory-utilization=0.5"};
            CHECKF(load(&c, cmds[i], argv, 4, err) == 0, "%s", err);
            config_engine_options(&c, &o);
            CHECKF(o.device == want[d] && o.gpu_memory_utilization == 0.5, "cmd %d --device %s", i, names[d]);
            server_config_deinit(&c);
        }
        /* 1 is allowed, (0, 1] only */
        CHECK(load(&c, cmds[i], (char *[]){"x", "--gpu-memory-utilization", "1"}, 3, err) == 0);
        server_config_deinit(&c);
        const char *bad_util[] = {"0", "-0.5", "1.01", "nan", "lots"};
        for (size_t k = 0; k < IFD_ARRAY_LEN(bad_util); k++) {
            err[0] = 0;
            char *argv[] = {"x", "--gpu-memory-utilization", (char *)bad_util[k]};
            CHECKF(load(&c, cmds[i], argv, 3, err) < 0, "%s accepted", bad_util[k]);
            CHECKF(strstr(err, "--gpu-memory-utilization") &&
                       (strstr(err, "(0, 1]") || strstr(err, "not a number")),
                   "'%s': %s", bad_util[k], err);
            server_config_deinit(&c);
        }
        const char *bad_dev[] = {"gpu", "CUDA", "", "cpu,cuda"};
        for (size_t k = 0; k < IFD_ARRAY_LEN(bad_dev); k++) {
            err[0] = 0;
            char *argv[] = {"x", "--device", (char *)bad_dev[k]};
            CHECKF(load(&c, cmds[i], argv, 3, err) < 0, "'%s' accepted", bad_dev[k]);
            CHECKF(strstr(err, "--device") && strstr(err, "auto|cuda|cpu|emu"), "'%s': %s", bad_dev[k], err);
            server_config_deinit(&c);
        }
    }
    /* serve: from the environment and the config file too */
    server_config c;
    char err[256] = "";
    setenv("INFERD_DEVICE", "cpu", 1);
    setenv("INFERD_GPU_MEMORY_UTILIZATION", "0.25", 1);
    CHECKF(load(&c, CFG_CMD_SERVE, (char *[]){"serve"}, 1, err) == 0, "%s", err);
    CHECK(c.device == 2 && c.gpu_memory_utilization == 0.25);
    server_config_deinit(&c);
    setenv("INFERD_GPU_MEMORY_UTILIZATION", "0", 1);
    CHECK(load(&c, CFG_CMD_SERVE, (char *[]){"serve"}, 1, err) < 0 && strstr(err, "INFERD_GPU_MEMORY_UTILIZATION"));
    server_config_deinit(&c);
    unsetenv("INFERD_DEVICE");
    unsetenv("INFERD_GPU_MEMORY_UTILIZATION");
}

/* --random-weights SHAPE --dtype TYPE --random-weights-seed N into the engine options */
static void test_random_weights_options(void) {
    const cfg_cmd cmds[] = {CFG_CMD_SERVE, CFG_CMD_GENERATE, CFG_CMD_BENCH};
    for (int i = 0; i < 3; i++) {
        server_config c;
        char err[256] = "";
        inferd_engine_options o;
        CHECK(load(&c, cmds[i], (char *[]){"x"}, 1, err) == 0);
        inferd_engine_options_default(&o);
        config_engine_options(&c, &o);
        CHECK(o.random_weights == NULL && o.random_dtype && !strcmp(o.random_dtype, "bf16"));
        server_config_deinit(&c);
        const char *shapes[] = {"tiny", "llama3-8b", "qwen2.5-1.5b"};
        const char *dtypes[] = {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_k", "q6_k"};
        for (int k = 0; k < 7; k++) {
            char *argv[] = {"x", "--random-weights", (char *)shapes[k % 3], "--dtype", (char *)dtypes[k],
                            "--random-weights-seed", "123"};
            CHECKF(load(&c, cmds[i], argv, 7, err) == 0, "%s", err);
            config_engine_options(&c, &o);
            CHECK(o.random_weights && !strcmp(o.random_weights, shapes[k % 3]));
            CHECK(!strcmp(o.random_dtype, dtypes[k]) && o.random_seed == 123);
            server_config_deinit(&c);
        }
        err[0] = 0;
        CHECK(load(&c, cmds[i], (char *[]){"x", "--random-weights", "llama-70b"}, 3, err) < 0);
        CHECKF(strstr(err, "--random-weights") && strstr(err, "tiny"), "%s", err);
        server_config_deinit(&c);
        err[0] = 0;
        CHECK(load(&c, cmds[i], (char *[]){"x", "--dtype", "q5_0"}, 3, err) < 0);
        CHECKF(strstr(err, "--dtype") && strstr(err, "q4_k"), "%s", err);
        server_config_deinit(&c);
    }
}

TEST_MAIN(T(test_shared_engine_options), T(test_kv_cache_dtype), T(test_command_options), T(test_generate_options),
          T(test_bench_options), T(test_perplexity_options), T(test_env_and_file_are_serve_only), T(test_help), T(test_device_options),
          T(test_random_weights_options))
