// AES-256-GCM with VAES and VPCLMULQDQ, for x86-64 CPUs that have them (AMD Zen 3 on, Intel Ice
// Lake on): two to three times OpenSSL 3.0's speed there, which has no VAES path for GCM.
// src/native/frame-cipher.cc is its only user, and uses OpenSSL where Usable() is false.
#pragma once
#include <cstddef>
#include <cstdint>

namespace vaes_gcm {

// True when the CPU and the OS allow it and, in a self-test at first use, it seals OpenSSL's bytes
// and opens what OpenSSL sealed.
bool Usable();

// "vaes-avx512" or "vaes-avx2": the registers its loop uses (512-bit where the CPU has AVX-512); "" when not usable.
const char* Name();

// Encrypts `length` bytes of `in` into `out` (the same bytes or apart), the tag into `tag`; false
// (nothing written) past GCM's length limit.
bool Seal(const uint8_t key[32], const uint8_t nonce[12], const uint8_t* aad, size_t aad_length, const uint8_t* in, size_t length, uint8_t* out,
          uint8_t tag[16]);

// Decrypts `length` bytes of `in` into `out` (the same bytes or apart) under key and nonce (12
// bytes) with `aad`, then checks `tag`: false, `out` zeroed, when it does not authenticate (false,
// nothing written, past the length limit).
bool Open(const uint8_t key[32], const uint8_t nonce[12], const uint8_t* aad, size_t aad_length, const uint8_t* in, size_t length,
          const uint8_t tag[16], uint8_t* out);

}  // namespace vaes_gcm
