/* bad_include.c — an engine-room source that includes a server header. Built by
 * layering_bad_include (compiled with IFD_ROOM_ENGINE), whose build must fail with the
 * layering message of src/util/layering.h; the same file built in the server room
 * (layering_good_include) must compile, so the failure is the guard's and not a broken
 * source. Never part of the default build. */
#include "server/httpd_parse.h"

int layering_probe_include(void) { return httpd_is_tchar('a') ? 0 : 1; }
