#ifndef CSHIMS_H
#define CSHIMS_H
// Non-variadic entry points for the few C functions Swift cannot call (variadic or macro APIs).
// Nothing else belongs here: every other C call goes straight through the system modules.
#include <stdint.h>
#include <microhttpd.h>

/// MHD_start_daemon with its options passed as an MHD_OPTION_ARRAY (terminated by MHD_OPTION_END).
struct MHD_Daemon *cshims_mhd_start_daemon(unsigned int flags, uint16_t port,
                                           MHD_AccessHandlerCallback handler, void *handler_cls,
                                           const struct MHD_OptionItem *options);

/// MHD_get_daemon_info for the info types that take no extra argument (e.g. MHD_DAEMON_INFO_BIND_PORT).
const union MHD_DaemonInfo *cshims_mhd_get_daemon_info(struct MHD_Daemon *daemon,
                                                       enum MHD_DaemonInfoType type);

/// MHD_get_connection_info for the info types that take no extra argument
/// (e.g. MHD_CONNECTION_INFO_CLIENT_ADDRESS).
const union MHD_ConnectionInfo *cshims_mhd_get_connection_info(struct MHD_Connection *connection,
                                                               enum MHD_ConnectionInfoType type);

#endif
