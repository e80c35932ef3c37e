/* cmd_serve.c — `inferd serve`: the OpenAI-compatible HTTP server (src/server/).
 * Options: `inferd serve --help`. Main thread. */
#include "../server/server.h"

#include "cli.h"

int cli_serve(int argc, char **argv) { return server_main(argc, argv); }
