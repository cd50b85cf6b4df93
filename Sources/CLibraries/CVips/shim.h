// The few calls of libvips (Debian's libvips-dev, 8.14) the uploads make, declared here rather
// than through <vips/vips.h>: that header needs GLib's, whose pkg-config flags carry -pthread,
// which SwiftPM refuses with a warning on every build. These are libvips' and GLib's stable C API,
// with their documented signatures.
#include <stddef.h>

typedef struct _VipsImage VipsImage;

int vips_init(const char *argv0);
void vips_cache_set_max(int max);
VipsImage *vips_image_new_from_buffer(const void *buf, size_t len, const char *option_string, ...);
int vips_image_get_width(const VipsImage *image);
int vips_image_get_height(const VipsImage *image);
int vips_image_get_n_pages(VipsImage *image);
int vips_autorot(VipsImage *in, VipsImage **out, ...);
int vips_image_write_to_buffer(VipsImage *in, const char *suffix, void **buf, size_t *size, ...);
const char *vips_error_buffer(void);
void vips_error_clear(void);
const char *vips_version_string(void);
void g_object_unref(void *object);
void g_free(void *memory);

// libvips' calls take their options as NULL-terminated varargs, which Swift cannot call.

/// An image from `length` bytes, read lazily (the header now, the pixels as they are asked for).
static inline VipsImage *wristler_vips_load(const void *bytes, size_t length, const char *options) {
    return vips_image_new_from_buffer(bytes, length, options, NULL);
}

/// `in` turned upright by its EXIF orientation (the tag is then dropped).
static inline int wristler_vips_autorot(VipsImage *in, VipsImage **out) {
    return vips_autorot(in, out, NULL);
}

/// `image` written in the format of `suffix` (`.jpg[Q=90,strip]`); `*bytes` is freed with g_free.
static inline int wristler_vips_save(VipsImage *image, const char *suffix, void **bytes, size_t *length) {
    return vips_image_write_to_buffer(image, suffix, bytes, length, NULL);
}

static inline int wristler_vips_pages(VipsImage *image) { return vips_image_get_n_pages(image); }

static inline void wristler_vips_unref(VipsImage *image) { g_object_unref(image); }
