#ifndef CSHIMS_H
#define CSHIMS_H
// Non-variadic entry points for the few C functions Swift cannot call (variadic or macro APIs).
// Nothing else belongs here: every other C call goes straight through the system modules.
#include <stdint.h>
#include <microhttpd.h>
#include <curl/curl.h>

/// MHD_start_daemon with its options passed as an MHD_OPTION_ARRAY (terminated by MHD_OPTION_END);
/// accept_policy may be NULL.
struct MHD_Daemon *cshims_mhd_start_daemon(unsigned int flags, uint16_t port,
                                           MHD_AcceptPolicyCallback accept_policy, void *accept_policy_cls,
                                           MHD_AccessHandlerCallback handler, void *handler_cls,
                                           const struct MHD_OptionItem *options);

/// MHD_get_daemon_info for the info types that take no extra argument (e.g. MHD_DAEMON_INFO_BIND_PORT).
const union MHD_DaemonInfo *cshims_mhd_get_daemon_info(struct MHD_Daemon *daemon,
                                                       enum MHD_DaemonInfoType type);

/// MHD_get_connection_info for the info types that take no extra argument
/// (e.g. MHD_CONNECTION_INFO_CLIENT_ADDRESS).
const union MHD_ConnectionInfo *cshims_mhd_get_connection_info(struct MHD_Connection *connection,
                                                               enum MHD_ConnectionInfoType type);

/// curl_easy_setopt for options that take a long.
CURLcode cshims_curl_setopt_long(CURL *handle, CURLoption option, long value);

/// curl_easy_setopt for options that take a pointer (strings, lists, user data, callbacks).
CURLcode cshims_curl_setopt_pointer(CURL *handle, CURLoption option, const void *value);

/// curl_easy_setopt for the write callback.
CURLcode cshims_curl_setopt_write_function(CURL *handle, curl_write_callback callback);

/// curl_easy_setopt for the open-socket callback (sees the address before the socket exists).
CURLcode cshims_curl_setopt_opensocket_function(CURL *handle, curl_opensocket_callback callback);

/// curl_easy_getinfo for infos that answer a long (e.g. CURLINFO_RESPONSE_CODE).
CURLcode cshims_curl_getinfo_long(CURL *handle, CURLINFO info, long *value);

#endif
