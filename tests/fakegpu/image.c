/* Placeholder until the image reader lands: reads nothing. */
#include "image.h"

#include <errno.h>

int fg_image_functions(const void *image, fg_image_fn fn, void *arg)
{
  (void)image;
  (void)fn;
  (void)arg;
  return -ENOTSUP;
}
