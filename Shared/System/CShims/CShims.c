#include "CShims.h"

struct MHD_Daemon *cshims_mhd_start_daemon(unsigned int flags, uint16_t port,
                                           MHD_AccessHandlerCallback handler, void *handler_cls,
                                           const struct MHD_OptionItem *options) {
    return MHD_start_daemon(flags, port, NULL, NULL, handler, handler_cls,
                            MHD_OPTION_ARRAY, options, MHD_OPTION_END);
}
