// AES-256-GCM of one encrypted-object frame into a buffer the caller owns (src/crypto/frame-gcm.ts
// is its only user; the format is src/format/encrypted-format.ts's).
//
// node:crypto's update() returns a freshly allocated, zero-filled output per call; on a busy host
// faulting those pages in costs several times the AES itself. Here the output is written where
// the caller says (a reused buffer, or in place), in one call per frame.
//
// The cipher is OpenSSL's, linked from the node binary itself (the code node:crypto runs), except on
// CPUs with VAES and VPCLMULQDQ, where src/native/gcm-vaes.cc does the same AES-256-GCM two to three
// times as fast, once it has matched OpenSSL in a self-test and unless preferOpenSsl() was called
// ("engine" says which). Both write and read the same bytes.
#define NAPI_VERSION 8
#include <node_api.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <atomic>
#include <cstdint>
#include <cstring>

#include "gcm-vaes.h"

namespace {

constexpr size_t kKeySize = 32;
constexpr size_t kNonceSize = 12;
constexpr size_t kTagSize = 16;
// OpenSSL's EVP lengths are ints; the format's frames are at most 16 MiB.
constexpr size_t kMaxLength = 1u << 30;

// One context and one fetched cipher per thread that calls in (the event loop, or a worker's).
struct ThreadCipher {
  EVP_CIPHER* cipher = EVP_CIPHER_fetch(nullptr, "AES-256-GCM", nullptr);
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  ~ThreadCipher() {
    EVP_CIPHER_CTX_free(ctx);
    EVP_CIPHER_free(cipher);
  }
};

ThreadCipher& Cipher() {
  static thread_local ThreadCipher tc;
  return tc;
}

void Throw(napi_env env, const char* what) {
  bool pending = false;
  napi_is_exception_pending(env, &pending);
  if (!pending) napi_throw_type_error(env, "ERR_FRAME_CIPHER", what);
}

struct Bytes {
  uint8_t* data = nullptr;
  size_t length = 0;
};

// The bytes of a Uint8Array; false (an exception pending) for anything else.
bool BytesOf(napi_env env, napi_value value, Bytes* out) {
  bool is_typed = false;
  napi_typedarray_type type;
  void* data = nullptr;
  if (napi_is_typedarray(env, value, &is_typed) != napi_ok || !is_typed ||
      napi_get_typedarray_info(env, value, &type, &out->length, &data, nullptr, nullptr) != napi_ok || type != napi_uint8_array) {
    Throw(env, "arguments must be Uint8Arrays");
    return false;
  }
  out->data = static_cast<uint8_t*>(data);
  if (out->length > kMaxLength) {
    Throw(env, "a frame of more than 1 GiB");
    return false;
  }
  return true;
}

// Input and output either start at the same byte or do not overlap at all (OpenSSL's in-place rule).
bool Apart(const Bytes& in, const Bytes& out) {
  if (in.data == out.data || in.length == 0 || out.length == 0) return true;
  return in.data + in.length <= out.data || out.data + out.length <= in.data;
}

// Set by preferOpenSsl() (SVC_ENCRYPTION_CIPHER=openssl) before any frame is sealed or opened.
std::atomic<bool> openssl_only{false};

// The CPU's vector AES-GCM (src/native/gcm-vaes.h) where it has one, it passed its self-test and
// OpenSSL was not asked for.
bool Wide() {
  static const bool usable = vaes_gcm::Usable();
  return usable && !openssl_only.load(std::memory_order_relaxed);
}

// Seals plain into out (plain's length + 16: the ciphertext, then the tag).
bool SealBytes(const uint8_t* key, const uint8_t* nonce, const Bytes& aad, const Bytes& plain, const Bytes& out) {
  if (Wide()) return vaes_gcm::Seal(key, nonce, aad.data, aad.length, plain.data, plain.length, out.data, out.data + plain.length);
  ThreadCipher& c = Cipher();
  int n = 0;
  bool ok = c.cipher != nullptr && c.ctx != nullptr && EVP_CipherInit_ex(c.ctx, c.cipher, nullptr, key, nonce, 1) == 1 &&
            EVP_CipherUpdate(c.ctx, nullptr, &n, aad.data, static_cast<int>(aad.length)) == 1 &&
            EVP_CipherUpdate(c.ctx, out.data, &n, plain.data, static_cast<int>(plain.length)) == 1 &&
            EVP_CipherFinal_ex(c.ctx, out.data + plain.length, &n) == 1 &&
            EVP_CIPHER_CTX_ctrl(c.ctx, EVP_CTRL_GCM_GET_TAG, kTagSize, out.data + plain.length) == 1;
  if (!ok) OPENSSL_cleanse(out.data, out.length);
  return ok;
}

// Opens stored (ciphertext, then the tag) into out (16 bytes shorter); false when it does not
// authenticate, out then zeroed: unauthenticated plaintext is never left behind.
bool OpenBytes(const uint8_t* key, const uint8_t* nonce, const Bytes& aad, const Bytes& stored, const Bytes& out) {
  if (Wide()) return vaes_gcm::Open(key, nonce, aad.data, aad.length, stored.data, out.length, stored.data + out.length, out.data);
  ThreadCipher& c = Cipher();
  uint8_t tag[kTagSize];
  std::memcpy(tag, stored.data + out.length, kTagSize);  // before an in-place write could reach it
  int n = 0;
  bool ok = c.cipher != nullptr && c.ctx != nullptr && EVP_CipherInit_ex(c.ctx, c.cipher, nullptr, key, nonce, 0) == 1 &&
            EVP_CIPHER_CTX_ctrl(c.ctx, EVP_CTRL_GCM_SET_TAG, kTagSize, tag) == 1 &&
            EVP_CipherUpdate(c.ctx, nullptr, &n, aad.data, static_cast<int>(aad.length)) == 1 &&
            EVP_CipherUpdate(c.ctx, out.data, &n, stored.data, static_cast<int>(out.length)) == 1 &&
            EVP_CipherFinal_ex(c.ctx, tag, &n) == 1;
  if (!ok) OPENSSL_cleanse(out.data, out.length);
  return ok;
}

// seal(key, nonce, aad, plain, out) and open(key, nonce, aad, stored, out): checks the arguments,
// then runs on the calling thread (a 256 KiB frame takes ~60 µs; handing it to another thread cost
// more than that on a busy 2-core host). seal throws on failure; open returns whether it authenticated.
napi_value Call(napi_env env, napi_callback_info info, bool seal) {
  napi_value argv[5];
  size_t argc = 5;
  if (napi_get_cb_info(env, info, &argc, argv, nullptr, nullptr) != napi_ok || argc < 5) {
    Throw(env, "usage: (key, nonce, aad, input, output)");
    return nullptr;
  }
  Bytes key, nonce, aad, in, out;
  if (!BytesOf(env, argv[0], &key) || !BytesOf(env, argv[1], &nonce) || !BytesOf(env, argv[2], &aad) || !BytesOf(env, argv[3], &in) ||
      !BytesOf(env, argv[4], &out))
    return nullptr;
  if (key.length != kKeySize || nonce.length != kNonceSize) {
    Throw(env, "a 32-byte key and a 12-byte nonce");
    return nullptr;
  }
  bool fits = (seal ? out.length == in.length + kTagSize : in.length >= kTagSize && out.length == in.length - kTagSize) && Apart(in, out);
  if (!fits) {
    Throw(env, seal ? "out must be plain's length + 16 bytes, the same bytes or apart" : "out must be stored's length - 16 bytes, the same bytes or apart");
    return nullptr;
  }
  bool ok = seal ? SealBytes(key.data, nonce.data, aad, in, out) : OpenBytes(key.data, nonce.data, aad, in, out);
  if (seal && !ok) {
    napi_throw_error(env, "ERR_FRAME_CIPHER", "AES-256-GCM failed");
    return nullptr;
  }
  napi_value result;
  napi_get_boolean(env, ok, &result);
  return result;
}

napi_value Seal(napi_env env, napi_callback_info info) { return Call(env, info, true); }
napi_value Open(napi_env env, napi_callback_info info) { return Call(env, info, false); }

// engine: which AES-256-GCM seals and opens frames now.
napi_value Engine(napi_env env, napi_callback_info) {
  napi_value name;
  napi_create_string_utf8(env, Wide() ? vaes_gcm::Name() : "openssl", NAPI_AUTO_LENGTH, &name);
  return name;
}

// preferOpenSsl(): OpenSSL's AES-256-GCM from now on, on every thread.
napi_value PreferOpenSsl(napi_env, napi_callback_info) {
  openssl_only.store(true, std::memory_order_relaxed);
  return nullptr;
}

napi_value Init(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
      {"seal", nullptr, Seal, nullptr, nullptr, nullptr, napi_enumerable, nullptr},
      {"open", nullptr, Open, nullptr, nullptr, nullptr, napi_enumerable, nullptr},
      {"preferOpenSsl", nullptr, PreferOpenSsl, nullptr, nullptr, nullptr, napi_enumerable, nullptr},
      {"engine", nullptr, nullptr, Engine, nullptr, nullptr, napi_enumerable, nullptr},
  };
  if (napi_define_properties(env, exports, sizeof props / sizeof props[0], props) != napi_ok) return nullptr;
  return exports;
}

}  // namespace

NAPI_MODULE(NODE_GYP_MODULE_NAME, Init)
