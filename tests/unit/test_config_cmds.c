/* test_config_cmds.c — the one option table as serve, generate and bench see it
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
    /* the same flags set the same engine options in all three commands */
    const cfg_cmd cmds[] = {CFG_CMD_SERVE, CFG_CMD_GENERATE, CFG_CMD_BENCH};
    for (int i = 0; i < 3; i++) {
        server_config c;
        char err[256] = "";
        char *argv[] = {"x", "-m", "m.gguf", "-t", "3", "--max-num-seqs", "5", "--max-num-batched-tokens=77",
                        "--kv-cache-memory", "1M", "--block-size", "32", "--max-model-len", "128",
                        "--no-enable-prefix-caching", "--reference-kernels", "--max-step-ms", "12.5"};
        CHECKF(load(&c, cmds[i], argv, (int)IFD_ARRAY_LEN(argv), err) == 0, "cmd %d: %s", i, err);
        inferd_engine_options o;
        memset(&o, 0, sizeof o);
        o.threaded = true;
        config_engine_options(&c, &o);
        CHECK(o.model_path && !strcmp(o.model_path, "m.gguf") && o.n_threads == 3 && o.max_num_seqs == 5);
        CHECK(o.max_num_batched_tokens == 77 && o.kv_cache_bytes == 1 << 20 && o.block_size == 32);
        CHECK(o.max_model_len == 128 && !o.enable_prefix_caching && o.reference_kernels);
        CHECK(o.max_step_ms == 12.5 && o.threaded); /* threaded is the caller's */
        CHECK(config_given(&c, "max-num-seqs") && !config_given(&c, "kv-cache-fraction"));
        server_config_deinit(&c);
    }
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
    char *s = help_of(CFG_CMD_SERVE), *g = help_of(CFG_CMD_GENERATE), *b = help_of(CFG_CMD_BENCH);
    const char *engine[] = {"--model STR", "--threads N", "--max-num-seqs N", "--max-num-batched-tokens N",
                            "--kv-cache-memory BYTES", "--kv-cache-fraction X", "--block-size N",
                            "--max-model-len N", "--enable-prefix-caching", "--reference-kernels", "--max-step-ms X"};
    for (size_t i = 0; i < IFD_ARRAY_LEN(engine); i++)
        CHECKF(strstr(s, engine[i]) && strstr(g, engine[i]) && strstr(b, engine[i]), "%s", engine[i]);
    CHECK(strstr(g, "--prompt STR") && strstr(g, "--n-predict N") && strstr(g, "--stop STR") && !strstr(g, "--port"));
    CHECK(strstr(b, "--input-len-range A:B") && strstr(b, "[offline|chunked]") && !strstr(b, "--temp"));
    CHECK(strstr(s, "--port N") && strstr(s, "{INFERD_PORT}") && !strstr(g, "{INFERD_") && !strstr(s, "--prompt"));
    CHECK(strstr(g, "--max-num-seqs N              sequences running at once (default 1)"));
    CHECK(strstr(s, "--max-num-seqs N              sequences running at once (default 64)"));
    free(s);
    free(g);
    free(b);
}

TEST_MAIN(T(test_shared_engine_options), T(test_command_options), T(test_generate_options),
          T(test_bench_options), T(test_env_and_file_are_serve_only), T(test_help))
