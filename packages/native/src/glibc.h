/*
 * Included first in every file of the module (build.mjs passes -include): pins the pthread
 * functions that glibc 2.34 moved from libpthread into libc, and versioned anew there, to their
 * original versions, so that a module built on glibc 2.34 or later still loads on glibc 2.28 to
 * 2.33 (Debian 10 and 11, Ubuntu 20.04, RHEL 8), where they come from the libpthread Node itself
 * is linked with. glibc 2.34 and later keep those versions for programs built before, so the
 * module loads there too. test/native.test.ts checks that no symbol of the build needs a glibc
 * newer than 2.28.
 */
#ifndef ST_CONVERT_GLIBC_H
#define ST_CONVERT_GLIBC_H

/* features.h fixes the feature macros at its first inclusion: the module's files ask for GNU's. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <features.h>

#if defined(__GLIBC__) && __GLIBC_PREREQ(2, 34)
#if defined(__x86_64__)
#define ST_CONVERT_PTHREAD_VERSION "GLIBC_2.2.5"
#elif defined(__aarch64__)
#define ST_CONVERT_PTHREAD_VERSION "GLIBC_2.17"
#endif
#endif

#ifdef ST_CONVERT_PTHREAD_VERSION
__asm__(".symver pthread_create, pthread_create@" ST_CONVERT_PTHREAD_VERSION);
__asm__(".symver pthread_join, pthread_join@" ST_CONVERT_PTHREAD_VERSION);
__asm__(".symver pthread_once, pthread_once@" ST_CONVERT_PTHREAD_VERSION);
__asm__(".symver pthread_mutex_trylock, pthread_mutex_trylock@" ST_CONVERT_PTHREAD_VERSION);
#endif

#endif
