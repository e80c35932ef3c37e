/* test_reference_greedy.c — `inferd generate --temp 0 --ids` must reproduce every row
 * of ../shared/models/reference-greedy.tsv (llama.cpp's greedy ids) exactly.
 * Runs the real binary (INFERD_BINARY) once per row, on the device INFERD_TEST_DEVICE
 * names (default: the binary's own choice); ctest runs it again as
 * test_reference_greedy_emu: the CUDA backend under the SIMT emulation. */
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_util.h"

extern char **environ;

/* Run argv, capture stdout into buf (NUL-terminated). Returns the exit status. */
static int run_capture(char *const argv[], char *buf, size_t cap) {
    int fd[2];
    if (pipe(fd)) return -1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fd[1], 1);
    posix_spawn_file_actions_addclose(&fa, fd[0]);
    pid_t pid;
    int rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fd[1]);
    if (rc) {
        close(fd[0]);
        return -1;
    }
    size_t n = 0;
    ssize_t got;
    while (n + 1 < cap && (got = read(fd[0], buf + n, cap - 1 - n)) > 0) n += (size_t)got;
    buf[n] = 0;
    close(fd[0]);
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Undo the C escapes of the tsv's prompt column (\n, \t, \\). */
static void unescape(char *s) {
    char *w = s;
    for (char *r = s; *r; r++) {
        if (*r == '\\' && r[1]) {
            r++;
            *w++ = *r == 'n' ? '\n' : *r == 't' ? '\t' : *r;
        } else {
            *w++ = *r;
        }
    }
    *w = 0;
}

static void test_reference_greedy(void) {
    const char *tsv = INFERD_SHARED_DIR "/models/reference-greedy.tsv";
    FILE *fp = fopen(tsv, "r");
    CHECKF(fp != NULL, "cannot open %s", tsv);
    if (!fp) return;
    char line[8192];
    int rows = 0, matched = 0;
    while (fgets(line, sizeof line, fp)) {
        line[strcspn(line, "\r\n")] = 0;
        if (!line[0]) continue;
        char *file = strtok(line, "\t"), *prompt = strtok(NULL, "\t"), *ids = strtok(NULL, "\t");
        CHECKF(file && prompt && ids, "malformed row %d", rows + 1);
        if (!file || !prompt || !ids) continue;
        rows++;
        unescape(prompt);
        int n_expected = 0;
        for (const char *p = ids; *p; p++)
            if ((p == ids || p[-1] == ' ') && *p != ' ') n_expected++;
        char model[1024], n_str[16];
        snprintf(model, sizeof model, "%s/models/%s", INFERD_SHARED_DIR, file);
        snprintf(n_str, sizeof n_str, "%d", n_expected);
        const char *dev = getenv("INFERD_TEST_DEVICE");
        char *argv[] = {INFERD_BINARY, "generate", "-m", model, "-p", prompt, "-n", n_str,
                        "--temp", "0", "--ids", dev ? "--device" : NULL, (char *)dev, NULL};
        char out[8192];
        int st = run_capture(argv, out, sizeof out);
        out[strcspn(out, "\r\n")] = 0;
        CHECKF(st == 0, "%s: exit status %d", file, st);
        if (strcmp(out, ids) == 0) {
            matched++;
        } else {
            fprintf(stderr, "  mismatch for %s prompt '%s'\n    expected: %s\n    got:      %s\n",
                    file, prompt, ids, out);
            t_failures++;
        }
    }
    fclose(fp);
    printf("  %d/%d reference rows reproduced\n", matched, rows);
    CHECK(rows >= 10);
}

TEST_MAIN(T(test_reference_greedy))
