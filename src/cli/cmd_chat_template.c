/* cmd_chat_template.c — placeholder until the command is written. */
#include <stdio.h>

#include "cli.h"

int cli_chat_template(int argc, char **argv) {
    (void)argc;
    fprintf(stderr, "inferd %s: not implemented yet\n", argv[0]);
    return 2;
}
