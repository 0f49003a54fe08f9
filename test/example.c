/* The README's C example, built as C against the public header and run under chorusrun by meson test. */
#include <chorus/chorus.h>
#include <stdio.h>

int main(void) {
  chorusComm_t comm;
  if (chorusCommInitFromEnv(&comm) != chorusSuccess) {
    fprintf(stderr, "init: %s\n", chorusGetLastError(NULL));
    return 1;
  }
  int nranks = 0;
  chorusCommCount(comm, &nranks);
  float x[4] = {1, 2, 3, 4};
  chorusResult_t r = chorusAllReduce(x, x, 4, chorusFloat32, chorusSum, comm, NULL);
  if (r != chorusSuccess) fprintf(stderr, "%s\n", chorusGetLastError(comm));
  for (int i = 0; i < 4; ++i)
    if (x[i] != (float)((i + 1) * nranks)) {
      fprintf(stderr, "x[%d] = %g, expected %d\n", i, x[i], (i + 1) * nranks);
      r = chorusInternalError;
    }
  chorusCommDestroy(comm);
  return (int)r;
}
