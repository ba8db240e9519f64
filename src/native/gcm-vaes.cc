// AES-256-GCM (NIST SP 800-38D) for x86-64 CPUs with VAES and VPCLMULQDQ: counter blocks
// encrypted 16 at a time (in 512-bit registers with AVX-512, else 256-bit ones), GHASH over the same
// 16 ciphertext blocks with H^16..H^1 (products summed unreduced, reduced once per 256 bytes), the
// rest a block at a time. GF(2^128) arithmetic on byte-reversed blocks, shifted and reduced as in
// Gueron and Kounavis, "Intel Carry-Less Multiplication Instruction and its Usage for Computing the
// GCM Mode" (Intel, 2014).
//
// No branch or memory access depends on a key or on data; lengths alone steer it. It is used only
// once it matched OpenSSL in SelfTest(), and test/unit/crypto/frame-gcm.test.ts checks it against
// node:crypto at every length up to 600 bytes and beyond.
#include "gcm-vaes.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>

namespace vaes_gcm {
namespace {

#define TARGET __attribute__((target("aes,pclmul,ssse3,sse4.1,avx,avx2,vaes,vpclmulqdq")))
#define TARGET512 __attribute__((target("aes,pclmul,ssse3,sse4.1,avx,avx2,vaes,vpclmulqdq,avx512f,avx512bw,avx512vl")))

struct Schedule {
  __m128i rk[15];
};

TARGET inline __m128i ShiftXor(__m128i k) {
  k = _mm_xor_si128(k, _mm_slli_si128(k, 4));
  k = _mm_xor_si128(k, _mm_slli_si128(k, 4));
  return _mm_xor_si128(k, _mm_slli_si128(k, 4));
}

// FIPS 197's AES-256 key expansion, with AESKEYGENASSIST doing SubWord (and RotWord) of the previous round key.
TARGET void Expand(const uint8_t key[32], Schedule* s) {
  s->rk[0] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(key));
  s->rk[1] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(key + 16));
#define ROUND_PAIR(i, rcon)                                                                                             \
  s->rk[i] = _mm_xor_si128(ShiftXor(s->rk[i - 2]), _mm_shuffle_epi32(_mm_aeskeygenassist_si128(s->rk[i - 1], rcon), 0xff)); \
  if (i + 1 < 15) s->rk[i + 1] = _mm_xor_si128(ShiftXor(s->rk[i - 1]), _mm_shuffle_epi32(_mm_aeskeygenassist_si128(s->rk[i], 0), 0xaa));
  ROUND_PAIR(2, 0x01)
  ROUND_PAIR(4, 0x02)
  ROUND_PAIR(6, 0x04)
  ROUND_PAIR(8, 0x08)
  ROUND_PAIR(10, 0x10)
  ROUND_PAIR(12, 0x20)
  ROUND_PAIR(14, 0x40)
#undef ROUND_PAIR
}

TARGET inline __m128i Encrypt1(const Schedule& s, __m128i b) {
  b = _mm_xor_si128(b, s.rk[0]);
  for (int r = 1; r < 14; r++) b = _mm_aesenc_si128(b, s.rk[r]);
  return _mm_aesenclast_si128(b, s.rk[14]);
}

// GF(2^128) of GCM on byte-reversed blocks (Intel's carry-less multiplication white paper, "gfmul"):
// the 256-bit product's three parts are summed unreduced, then shifted by one bit and reduced once.
struct Wide {
  __m128i lo, mid, hi;
};

TARGET inline void MulAdd(Wide* w, __m128i a, __m128i b) {
  w->lo = _mm_xor_si128(w->lo, _mm_clmulepi64_si128(a, b, 0x00));
  w->mid = _mm_xor_si128(w->mid, _mm_xor_si128(_mm_clmulepi64_si128(a, b, 0x10), _mm_clmulepi64_si128(a, b, 0x01)));
  w->hi = _mm_xor_si128(w->hi, _mm_clmulepi64_si128(a, b, 0x11));
}

TARGET inline __m128i Reduce(const Wide& w) {
  __m128i t3 = _mm_xor_si128(w.lo, _mm_slli_si128(w.mid, 8));
  __m128i t6 = _mm_xor_si128(w.hi, _mm_srli_si128(w.mid, 8));
  // The product << 1 (the bit-reflected order's offset).
  __m128i t7 = _mm_srli_epi32(t3, 31);
  __m128i t8 = _mm_srli_epi32(t6, 31);
  t3 = _mm_slli_epi32(t3, 1);
  t6 = _mm_slli_epi32(t6, 1);
  __m128i t9 = _mm_srli_si128(t7, 12);
  t8 = _mm_slli_si128(t8, 4);
  t7 = _mm_slli_si128(t7, 4);
  t3 = _mm_or_si128(t3, t7);
  t6 = _mm_or_si128(_mm_or_si128(t6, t8), t9);
  // Modulo x^128 + x^7 + x^2 + x + 1.
  t7 = _mm_xor_si128(_mm_xor_si128(_mm_slli_epi32(t3, 31), _mm_slli_epi32(t3, 30)), _mm_slli_epi32(t3, 25));
  t8 = _mm_srli_si128(t7, 4);
  t7 = _mm_slli_si128(t7, 12);
  t3 = _mm_xor_si128(t3, t7);
  __m128i t2 = _mm_xor_si128(_mm_xor_si128(_mm_srli_epi32(t3, 1), _mm_srli_epi32(t3, 2)), _mm_srli_epi32(t3, 7));
  t2 = _mm_xor_si128(t2, t8);
  t3 = _mm_xor_si128(t3, t2);
  return _mm_xor_si128(t6, t3);
}

TARGET inline __m128i Mul(__m128i a, __m128i b) {
  Wide w{_mm_setzero_si128(), _mm_setzero_si128(), _mm_setzero_si128()};
  MulAdd(&w, a, b);
  return Reduce(w);
}

TARGET inline __m128i Reverse(__m128i b) {
  return _mm_shuffle_epi8(b, _mm_set_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
}

// Hashes whole and partial (zero-padded) blocks of `data` into y, one at a time.
TARGET __m128i HashTail(__m128i y, __m128i h, const uint8_t* data, size_t length) {
  for (size_t at = 0; at < length; at += 16) {
    uint8_t block[16] = {0};
    std::memcpy(block, data + at, length - at < 16 ? length - at : 16);
    y = Mul(_mm_xor_si128(y, Reverse(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block)))), h);
  }
  return y;
}

constexpr size_t kGroup = 16;  // blocks per pass of the wide loops (256 bytes)
// Within GCM's limit (2^32 - 2 blocks under one nonce): frames are far smaller (the addon takes 1 GiB at most).
constexpr size_t kMaxLength = size_t{1} << 32;

// Counter blocks are the nonce, then the block counter big-endian: from 2 for the data (1 is the
// tag's mask). The wide loops keep host-order counters in each lane's last dword and shuffle them
// to big-endian per use. Each loop takes whole 256-byte groups and returns the GHASH state.

// 256-bit registers: two blocks each, eight registers a group.
TARGET __m128i Groups256(bool seal, const Schedule& s, const __m128i hp[kGroup + 1], __m128i y, const uint8_t nonce[12], const uint8_t* in, uint8_t* out,
                         size_t groups) {
  __m256i pow[kGroup / 2];  // H^(16-2k) in the low lane, H^(15-2k) in the high one
  for (size_t k = 0; k < kGroup / 2; k++) pow[k] = _mm256_setr_m128i(hp[kGroup - 2 * k], hp[kGroup - 1 - 2 * k]);
  __m256i rk[15];
  for (int r = 0; r < 15; r++) rk[r] = _mm256_broadcastsi128_si256(s.rk[r]);
  const __m256i swap_ctr = _mm256_broadcastsi128_si256(_mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 15, 14, 13, 12));
  const __m256i reverse = _mm256_broadcastsi128_si256(_mm_setr_epi8(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0));
  int n[3];
  std::memcpy(n, nonce, 12);
  __m256i ctr = _mm256_setr_epi32(n[0], n[1], n[2], 2, n[0], n[1], n[2], 3);
  const __m256i step = _mm256_setr_epi32(0, 0, 0, 2, 0, 0, 0, 2);
  __m256i b[kGroup / 2];
  for (size_t g = 0; g < groups; g++, in += kGroup * 16, out += kGroup * 16) {
#pragma GCC unroll 8
    for (size_t k = 0; k < kGroup / 2; k++) {
      b[k] = _mm256_xor_si256(_mm256_shuffle_epi8(ctr, swap_ctr), rk[0]);
      ctr = _mm256_add_epi32(ctr, step);
    }
#pragma GCC unroll 13
    for (int r = 1; r < 14; r++)
#pragma GCC unroll 8
      for (size_t k = 0; k < kGroup / 2; k++) b[k] = _mm256_aesenc_epi128(b[k], rk[r]);
    __m256i lo = _mm256_setzero_si256(), mid = _mm256_setzero_si256(), hi = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (size_t k = 0; k < kGroup / 2; k++) {
      const __m256i i = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + 32 * k));
      const __m256i o = _mm256_xor_si256(i, _mm256_aesenclast_epi128(b[k], rk[14]));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 32 * k), o);
      __m256i x = _mm256_shuffle_epi8(seal ? o : i, reverse);
      if (k == 0) x = _mm256_xor_si256(x, _mm256_zextsi128_si256(y));
      lo = _mm256_xor_si256(lo, _mm256_clmulepi64_epi128(x, pow[k], 0x00));
      mid = _mm256_xor_si256(mid, _mm256_xor_si256(_mm256_clmulepi64_epi128(x, pow[k], 0x10), _mm256_clmulepi64_epi128(x, pow[k], 0x01)));
      hi = _mm256_xor_si256(hi, _mm256_clmulepi64_epi128(x, pow[k], 0x11));
    }
    const Wide w{_mm_xor_si128(_mm256_castsi256_si128(lo), _mm256_extracti128_si256(lo, 1)),
                 _mm_xor_si128(_mm256_castsi256_si128(mid), _mm256_extracti128_si256(mid, 1)),
                 _mm_xor_si128(_mm256_castsi256_si128(hi), _mm256_extracti128_si256(hi, 1))};
    y = Reduce(w);
  }
  OPENSSL_cleanse(pow, sizeof pow);
  OPENSSL_cleanse(rk, sizeof rk);
  OPENSSL_cleanse(b, sizeof b);
  return y;
}

// GCC 12's own AVX-512 headers start results from "undefined" registers, which -Wall reports.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

TARGET512 inline __m128i Fold512(__m512i v) {
  const __m256i h = _mm256_xor_si256(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
  return _mm_xor_si128(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

// 512-bit registers: four blocks each, four registers a group, the round keys held in registers.
TARGET512 __m128i Groups512(bool seal, const Schedule& s, const __m128i hp[kGroup + 1], __m128i y, const uint8_t nonce[12], const uint8_t* in,
                            uint8_t* out, size_t groups) {
  __m512i pow[kGroup / 4];  // H^(16-4k), H^(15-4k), H^(14-4k), H^(13-4k) from the low lane up
  for (size_t k = 0; k < kGroup / 4; k++) {
    __m512i p = _mm512_castsi128_si512(hp[kGroup - 4 * k]);
    p = _mm512_inserti32x4(p, hp[kGroup - 1 - 4 * k], 1);
    p = _mm512_inserti32x4(p, hp[kGroup - 2 - 4 * k], 2);
    pow[k] = _mm512_inserti32x4(p, hp[kGroup - 3 - 4 * k], 3);
  }
  __m512i rk[15];
  for (int r = 0; r < 15; r++) rk[r] = _mm512_broadcast_i32x4(s.rk[r]);
  const __m512i swap_ctr = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 15, 14, 13, 12));
  const __m512i reverse = _mm512_broadcast_i32x4(_mm_setr_epi8(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0));
  int n[3];
  std::memcpy(n, nonce, 12);
  __m512i ctr = _mm512_setr_epi32(n[0], n[1], n[2], 2, n[0], n[1], n[2], 3, n[0], n[1], n[2], 4, n[0], n[1], n[2], 5);
  const __m512i step = _mm512_setr_epi32(0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0, 4);
  __m512i b[kGroup / 4];
  for (size_t g = 0; g < groups; g++, in += kGroup * 16, out += kGroup * 16) {
#pragma GCC unroll 4
    for (size_t k = 0; k < kGroup / 4; k++) {
      b[k] = _mm512_xor_si512(_mm512_shuffle_epi8(ctr, swap_ctr), rk[0]);
      ctr = _mm512_add_epi32(ctr, step);
    }
#pragma GCC unroll 13
    for (int r = 1; r < 14; r++)
#pragma GCC unroll 4
      for (size_t k = 0; k < kGroup / 4; k++) b[k] = _mm512_aesenc_epi128(b[k], rk[r]);
    __m512i lo = _mm512_setzero_si512(), mid = _mm512_setzero_si512(), hi = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (size_t k = 0; k < kGroup / 4; k++) {
      const __m512i i = _mm512_loadu_si512(in + 64 * k);
      const __m512i o = _mm512_xor_si512(i, _mm512_aesenclast_epi128(b[k], rk[14]));
      _mm512_storeu_si512(out + 64 * k, o);
      __m512i x = _mm512_shuffle_epi8(seal ? o : i, reverse);
      if (k == 0) x = _mm512_xor_si512(x, _mm512_zextsi128_si512(y));
      lo = _mm512_xor_si512(lo, _mm512_clmulepi64_epi128(x, pow[k], 0x00));
      mid = _mm512_xor_si512(mid, _mm512_xor_si512(_mm512_clmulepi64_epi128(x, pow[k], 0x10), _mm512_clmulepi64_epi128(x, pow[k], 0x01)));
      hi = _mm512_xor_si512(hi, _mm512_clmulepi64_epi128(x, pow[k], 0x11));
    }
    y = Reduce(Wide{Fold512(lo), Fold512(mid), Fold512(hi)});
  }
  OPENSSL_cleanse(pow, sizeof pow);
  OPENSSL_cleanse(rk, sizeof rk);
  OPENSSL_cleanse(b, sizeof b);
  return y;
}

#pragma GCC diagnostic pop

enum class Width { k256, k512 };
Width width = Width::k256;  // set once, by Supported() under Usable()'s static initialisation

// CTR over `in` into `out` with GHASH over the ciphertext (the output when sealing, the input when
// opening); the tag into `tag`.
TARGET void Crypt(bool seal, const uint8_t key[32], const uint8_t nonce[12], const uint8_t* aad, size_t aad_length, const uint8_t* in, size_t length,
                  uint8_t* out, uint8_t tag[16]) {
  Schedule s;
  Expand(key, &s);
  __m128i hp[kGroup + 1];  // H^1..H^16
  hp[0] = _mm_setzero_si128();
  hp[1] = Reverse(Encrypt1(s, _mm_setzero_si128()));
  for (size_t i = 2; i <= kGroup; i++) hp[i] = Mul(hp[i - 1], hp[1]);
  const __m128i h = hp[1];
  uint8_t j0[16];
  std::memcpy(j0, nonce, 12);
  j0[12] = 0, j0[13] = 0, j0[14] = 0, j0[15] = 1;
  const __m128i mask = Encrypt1(s, _mm_loadu_si128(reinterpret_cast<const __m128i*>(j0)));

  __m128i y = HashTail(_mm_setzero_si128(), h, aad, aad_length);
  const size_t groups = length / (kGroup * 16);
  if (groups > 0) y = (width == Width::k512 ? Groups512 : Groups256)(seal, s, hp, y, nonce, in, out, groups);
  // The rest, a block at a time (the last one partial).
  size_t at = groups * kGroup * 16;
  uint32_t next = 2 + static_cast<uint32_t>(at / 16);
  for (; at < length; at += 16) {
    const size_t n = length - at < 16 ? length - at : 16;
    uint8_t i[16] = {0}, o[16] = {0}, cb[16], ks[16];
    std::memcpy(i, in + at, n);
    std::memcpy(cb, nonce, 12);
    cb[12] = static_cast<uint8_t>(next >> 24), cb[13] = static_cast<uint8_t>(next >> 16), cb[14] = static_cast<uint8_t>(next >> 8), cb[15] = static_cast<uint8_t>(next);
    next++;
    _mm_storeu_si128(reinterpret_cast<__m128i*>(ks), Encrypt1(s, _mm_loadu_si128(reinterpret_cast<const __m128i*>(cb))));
    for (size_t k = 0; k < n; k++) o[k] = i[k] ^ ks[k];
    std::memcpy(out + at, o, n);
    y = Mul(_mm_xor_si128(y, Reverse(_mm_loadu_si128(reinterpret_cast<const __m128i*>(seal ? o : i)))), h);
    OPENSSL_cleanse(ks, sizeof ks);
  }
  uint8_t lengths[16];
  const uint64_t abits = static_cast<uint64_t>(aad_length) * 8, cbits = static_cast<uint64_t>(length) * 8;
  for (int i = 0; i < 8; i++) lengths[i] = static_cast<uint8_t>(abits >> (56 - 8 * i)), lengths[8 + i] = static_cast<uint8_t>(cbits >> (56 - 8 * i));
  y = Mul(_mm_xor_si128(y, Reverse(_mm_loadu_si128(reinterpret_cast<const __m128i*>(lengths)))), h);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(tag), _mm_xor_si128(Reverse(y), mask));
  // The key schedule and H's powers are not left on the stack.
  OPENSSL_cleanse(&s, sizeof s);
  OPENSSL_cleanse(hp, sizeof hp);
}

// Whether the CPU and the OS allow the 256-bit loop (and so the 512-bit one, set in `width`).
bool Supported() {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  if (!(c & bit_AES) || !(c & bit_PCLMUL) || !(c & bit_AVX) || !(c & bit_OSXSAVE)) return false;
  unsigned xlo, xhi;
  __asm__("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
  if ((xlo & 0x6) != 0x6) return false;  // the OS saves the xmm and ymm registers
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  if (!(b & bit_AVX2) || !(c & bit_VAES) || !(c & bit_VPCLMULQDQ)) return false;
  // And the zmm and mask registers: the 512-bit loop, unless STOWAGE_GCM_WIDTH=256 (the tests' way to check the other loop).
  const char* forced = std::getenv("STOWAGE_GCM_WIDTH");
  const bool avx512 = (xlo & 0xe0) == 0xe0 && (b & bit_AVX512F) && (b & bit_AVX512BW) && (b & bit_AVX512VL) && !(forced && std::strcmp(forced, "256") == 0);
  width = avx512 ? Width::k512 : Width::k256;
  return true;
}

// The wide path must seal OpenSSL's bytes, open what OpenSSL sealed, and refuse it with a bit flipped.
bool SelfTest() {
  uint8_t key[32], nonce[12], aad[89];
  for (size_t i = 0; i < sizeof key; i++) key[i] = static_cast<uint8_t>(7 * i + 1);
  for (size_t i = 0; i < sizeof nonce; i++) nonce[i] = static_cast<uint8_t>(11 * i + 3);
  for (size_t i = 0; i < sizeof aad; i++) aad[i] = static_cast<uint8_t>(13 * i + 5);
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  if (ctx == nullptr) return false;
  bool ok = true;
  for (size_t length : {size_t{0}, size_t{1}, size_t{16}, size_t{31}, size_t{256}, size_t{257}, size_t{4109}}) {
    std::vector<uint8_t> plain(length), sealed(length + 16), opened(length + 1);
    for (size_t i = 0; i < length; i++) plain[i] = static_cast<uint8_t>(i * 31 + length);
    int n = 0;
    ok = EVP_EncryptInit_ex(ctx, EVP_aes_256_gcm(), nullptr, key, nonce) == 1 && EVP_EncryptUpdate(ctx, nullptr, &n, aad, sizeof aad) == 1 &&
         EVP_EncryptUpdate(ctx, sealed.data(), &n, plain.data(), static_cast<int>(length)) == 1 &&
         EVP_EncryptFinal_ex(ctx, sealed.data() + length, &n) == 1 &&
         EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, 16, sealed.data() + length) == 1 &&
         Open(key, nonce, aad, sizeof aad, sealed.data(), length, sealed.data() + length, opened.data()) &&
         std::memcmp(opened.data(), plain.data(), length) == 0;
    std::vector<uint8_t> ours(length + 16);
    ok = ok && Seal(key, nonce, aad, sizeof aad, plain.data(), length, ours.data(), ours.data() + length) && ours == sealed;
    if (ok) {
      sealed[length / 2] ^= 0x20;
      ok = !Open(key, nonce, aad, sizeof aad, sealed.data(), length, sealed.data() + length, opened.data());
    }
    if (!ok) break;
  }
  EVP_CIPHER_CTX_free(ctx);
  return ok;
}

}  // namespace

bool Usable() {
  static const bool usable = Supported() && SelfTest();
  return usable;
}

const char* Name() { return !Usable() ? "" : width == Width::k512 ? "vaes-avx512" : "vaes-avx2"; }

bool Seal(const uint8_t key[32], const uint8_t nonce[12], const uint8_t* aad, size_t aad_length, const uint8_t* in, size_t length, uint8_t* out,
          uint8_t tag[16]) {
  if (length > kMaxLength || aad_length > kMaxLength) return false;
  Crypt(true, key, nonce, aad, aad_length, in, length, out, tag);
  return true;
}

bool Open(const uint8_t key[32], const uint8_t nonce[12], const uint8_t* aad, size_t aad_length, const uint8_t* in, size_t length,
          const uint8_t tag[16], uint8_t* out) {
  if (length > kMaxLength || aad_length > kMaxLength) return false;
  uint8_t expected[16];
  std::memcpy(expected, tag, sizeof expected);  // before an in-place write could reach it
  uint8_t computed[16];
  Crypt(false, key, nonce, aad, aad_length, in, length, out, computed);
  const bool ok = CRYPTO_memcmp(expected, computed, sizeof computed) == 0;
  if (!ok) OPENSSL_cleanse(out, length);
  return ok;
}

}  // namespace vaes_gcm

#else  // not x86-64: OpenSSL does all of it

namespace vaes_gcm {

bool Usable() { return false; }

const char* Name() { return ""; }

bool Seal(const uint8_t*, const uint8_t*, const uint8_t*, size_t, const uint8_t*, size_t, uint8_t*, uint8_t*) { return false; }

bool Open(const uint8_t*, const uint8_t*, const uint8_t*, size_t, const uint8_t*, size_t, const uint8_t*, uint8_t*) { return false; }

}  // namespace vaes_gcm

#endif
