#include "CShims.h"

struct MHD_Daemon *cshims_mhd_start_daemon(unsigned int flags, uint16_t port,
                                           MHD_AcceptPolicyCallback accept_policy, void *accept_policy_cls,
                                           MHD_AccessHandlerCallback handler, void *handler_cls,
                                           const struct MHD_OptionItem *options) {
    return MHD_start_daemon(flags, port, accept_policy, accept_policy_cls, handler, handler_cls,
                            MHD_OPTION_ARRAY, options, MHD_OPTION_END);
}

const union MHD_DaemonInfo *cshims_mhd_get_daemon_info(struct MHD_Daemon *daemon,
                                                       enum MHD_DaemonInfoType type) {
    return MHD_get_daemon_info(daemon, type);
}

const union MHD_ConnectionInfo *cshims_mhd_get_connection_info(struct MHD_Connection *connection,
                                                               enum MHD_ConnectionInfoType type) {
    return MHD_get_connection_info(connection, type);
}

CURLcode cshims_curl_setopt_long(CURL *handle, CURLoption option, long value) {
    return curl_easy_setopt(handle, option, value);
}

CURLcode cshims_curl_setopt_pointer(CURL *handle, CURLoption option, const void *value) {
    return curl_easy_setopt(handle, option, value);
}

CURLcode cshims_curl_setopt_write_function(CURL *handle, curl_write_callback callback) {
    return curl_easy_setopt(handle, CURLOPT_WRITEFUNCTION, callback);
}

CURLcode cshims_curl_setopt_opensocket_function(CURL *handle, curl_opensocket_callback callback) {
    return curl_easy_setopt(handle, CURLOPT_OPENSOCKETFUNCTION, callback);
}

CURLcode cshims_curl_getinfo_long(CURL *handle, CURLINFO info, long *value) {
    return curl_easy_getinfo(handle, info, value);
}
