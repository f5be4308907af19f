#include <librdkafka/rdkafka.h>
