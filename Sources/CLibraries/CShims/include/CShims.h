#ifndef WRISTLER_CSHIMS_H
#define WRISTLER_CSHIMS_H

// Swift cannot call C variadic functions. These are the fixed-signature doors into the ones the
// tier uses: one per argument type that curl_easy_setopt/curl_multi_setopt/curl_easy_getinfo take,
// and MHD_start_daemon with the options the HTTP server sets passed as an MHD_OptionItem array.

#include <stdint.h>
#include <curl/curl.h>
#include <sys/types.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <microhttpd.h>

CURLcode wristler_curl_easy_setopt_long(CURL *handle, CURLoption option, long value);
CURLcode wristler_curl_easy_setopt_pointer(CURL *handle, CURLoption option, void *value);
CURLcode wristler_curl_easy_setopt_string(CURL *handle, CURLoption option, const char *value);
CURLcode wristler_curl_easy_setopt_off_t(CURL *handle, CURLoption option, curl_off_t value);
CURLcode wristler_curl_easy_getinfo_long(CURL *handle, CURLINFO info, long *value);
CURLcode wristler_curl_easy_getinfo_pointer(CURL *handle, CURLINFO info, void **value);
CURLMcode wristler_curl_multi_setopt_long(CURLM *handle, CURLMoption option, long value);
CURLMcode wristler_curl_multi_setopt_pointer(CURLM *handle, CURLMoption option, void *value);

/// Starts a daemon with options given as an array ending in MHD_OPTION_END
/// (MHD_OPTION_ARRAY is the library's own non-variadic form).
struct MHD_Daemon *wristler_mhd_start_daemon(unsigned int flags, uint16_t port,
                                             MHD_AcceptPolicyCallback accept_policy, void *accept_policy_context,
                                             MHD_AccessHandlerCallback handler, void *handler_context,
                                             const struct MHD_OptionItem *options);

/// The port a running daemon listens on (MHD_get_daemon_info is variadic); 0 when unknown.
uint16_t wristler_mhd_bound_port(struct MHD_Daemon *daemon);

/// The socket of a connection (MHD_get_connection_info is variadic); -1 when unknown.
int wristler_mhd_connection_socket(struct MHD_Connection *connection);

/// The client's IPv4 address in network byte order, as libmicrohttpd kept it at accept (no
/// system call); 0 when unknown or not IPv4.
uint32_t wristler_mhd_client_ipv4(struct MHD_Connection *connection);

/// The commit the binary was built from: `git describe --always --dirty` as the Makefile (or the
/// package's build) wrote it into build_commit.h beside CShims.c; "unknown" for a build without it.
const char *wristler_build_commit(void);

#endif
