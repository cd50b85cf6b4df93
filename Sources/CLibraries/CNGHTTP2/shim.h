#include <nghttp2/nghttp2.h>
#include <sys/eventfd.h>

// The HTTP/2 client's wake-up: an eventfd, non-blocking, closed on exec.
static inline int wristler_eventfd(void) { return eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC); }
