#include "CShims.h"

CURLcode wristler_curl_easy_setopt_long(CURL *handle, CURLoption option, long value) {
    return curl_easy_setopt(handle, option, value);
}
CURLcode wristler_curl_easy_setopt_pointer(CURL *handle, CURLoption option, void *value) {
    return curl_easy_setopt(handle, option, value);
}
CURLcode wristler_curl_easy_setopt_string(CURL *handle, CURLoption option, const char *value) {
    return curl_easy_setopt(handle, option, value);
}
CURLcode wristler_curl_easy_setopt_off_t(CURL *handle, CURLoption option, curl_off_t value) {
    return curl_easy_setopt(handle, option, value);
}
CURLcode wristler_curl_easy_getinfo_long(CURL *handle, CURLINFO info, long *value) {
    return curl_easy_getinfo(handle, info, value);
}
CURLcode wristler_curl_easy_getinfo_pointer(CURL *handle, CURLINFO info, void **value) {
    return curl_easy_getinfo(handle, info, value);
}
CURLMcode wristler_curl_multi_setopt_long(CURLM *handle, CURLMoption option, long value) {
    return curl_multi_setopt(handle, option, value);
}
CURLMcode wristler_curl_multi_setopt_pointer(CURLM *handle, CURLMoption option, void *value) {
    return curl_multi_setopt(handle, option, value);
}

struct MHD_Daemon *wristler_mhd_start_daemon(unsigned int flags, uint16_t port,
                                             MHD_AcceptPolicyCallback accept_policy, void *accept_policy_context,
                                             MHD_AccessHandlerCallback handler, void *handler_context,
                                             const struct MHD_OptionItem *options) {
    if (options == NULL) {
        return MHD_start_daemon(flags, port, accept_policy, accept_policy_context, handler, handler_context,
                                MHD_OPTION_END);
    }
    return MHD_start_daemon(flags, port, accept_policy, accept_policy_context, handler, handler_context,
                            MHD_OPTION_ARRAY, options, MHD_OPTION_END);
}

uint16_t wristler_mhd_bound_port(struct MHD_Daemon *daemon) {
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_BIND_PORT);
    return info == NULL ? 0 : info->port;
}

int wristler_mhd_connection_socket(struct MHD_Connection *connection) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    return info == NULL ? -1 : info->connect_fd;
}

uint32_t wristler_mhd_client_ipv4(struct MHD_Connection *connection) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (info == NULL || info->client_addr == NULL || info->client_addr->sa_family != AF_INET) return 0;
    return ((const struct sockaddr_in *) info->client_addr)->sin_addr.s_addr;
}

// build_commit.h is written by `make` (scripts/build-commit.sh) and not kept in git.
#if __has_include("build_commit.h")
#include "build_commit.h"
#endif
#ifndef WRISTLER_BUILD_COMMIT
#define WRISTLER_BUILD_COMMIT "unknown"
#endif

const char *wristler_build_commit(void) { return WRISTLER_BUILD_COMMIT; }
