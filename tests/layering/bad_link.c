/* bad_link.c — an engine-room program that calls a server function without including
 * its header (so only the link rules can stop it). layering_bad_link links it against
 * ifd_engine alone and must fail to link; layering_good_link links the same file
 * against ifd_server and must build. Never run, never part of the default build. */
#include <stddef.h>

const char *httpd_reason(int status); /* src/server/httpd_parse.h */

int main(void) { return httpd_reason(200) != NULL ? 0 : 1; }
