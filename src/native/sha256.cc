// sha256 of large uploads off the event loop (src/workers/native-hasher.ts is its only user).
//
// A running hash per stream, hashed on the addon's own native thread (no V8 isolate to hold memory
// or start), callbacks on the event loop through a thread-safe function. Not libuv's pool: its
// threads also run the same uploads' O_DIRECT writes, and a hash queued behind them waits.
//
// A saved state (snapshot) lets a resumable upload's hash go on after a restart or on another node:
// the eight chaining words (big-endian), the byte count (big-endian u64), then the unfinished
// 64-byte block; src/workers/sha256-state.ts reads and writes the same.
//
// The sha256 is OpenSSL's, linked from the node binary itself: the code node:crypto runs, SHA-NI included.
#define NAPI_VERSION 8
#define OPENSSL_SUPPRESS_DEPRECATED 1
#include <node_api.h>
#include <openssl/sha.h>

#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <mutex>
#include <new>
#include <thread>

namespace {

constexpr size_t kStateHead = 8 * 4 + 8;  // chaining words, byte count
constexpr size_t kStateMax = kStateHead + 63;

struct Stream {
  SHA256_CTX ctx;
  size_t outstanding = 0;  // buffers given whose callback has not run (event loop only)
  bool finished = false;   // the digest was taken (event loop only)
};

// One buffer given to a stream: hashed on the thread, then its callback runs on the loop.
struct Item {
  Stream* stream = nullptr;
  napi_ref stream_ref = nullptr;  // the stream stays alive until the callback has run
  napi_ref data_ref = nullptr;    // so do the bytes
  napi_ref callback_ref = nullptr;
  const uint8_t* bytes = nullptr;
  size_t length = 0;
  bool snapshot = false;          // no bytes: the state after every buffer given before is saved
  uint8_t state[kStateMax] = {};  // the saved state (snapshot), written on the thread
  size_t state_length = 0;
};

void PutBig(uint8_t* out, uint64_t value, int bytes) {
  for (int i = bytes - 1; i >= 0; i--, value >>= 8) out[i] = static_cast<uint8_t>(value);
}

uint64_t GetBig(const uint8_t* in, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; i++) value = (value << 8) | in[i];
  return value;
}

// The context's state in the portable format; returns its length.
size_t SaveState(const SHA256_CTX& ctx, uint8_t* out) {
  for (int i = 0; i < 8; i++) PutBig(out + 4 * i, ctx.h[i], 4);
  uint64_t bits = (static_cast<uint64_t>(ctx.Nh) << 32) | ctx.Nl;
  PutBig(out + 32, bits >> 3, 8);
  std::memcpy(out + kStateHead, ctx.data, ctx.num);  // OpenSSL keeps the unfinished block as bytes
  return kStateHead + ctx.num;
}

// A context from a saved state; false when the bytes are not one.
bool LoadState(const uint8_t* in, size_t length, SHA256_CTX* ctx) {
  if (length < kStateHead || length > kStateMax) return false;
  uint64_t count = GetBig(in + 32, 8);
  size_t tail = length - kStateHead;
  if (count % 64 != tail || count >> 61 != 0) return false;
  SHA256_Init(ctx);
  for (int i = 0; i < 8; i++) ctx->h[i] = static_cast<SHA_LONG>(GetBig(in + 4 * i, 4));
  uint64_t bits = count << 3;
  ctx->Nl = static_cast<SHA_LONG>(bits & 0xffffffffu);
  ctx->Nh = static_cast<SHA_LONG>(bits >> 32);
  std::memcpy(ctx->data, in + kStateHead, tail);
  ctx->num = static_cast<unsigned int>(tail);
  return true;
}

// Per environment: the hashing thread, its queue (all streams' buffers, in the order given, so each
// stream's are hashed in order), and the thread-safe function that calls the callbacks.
struct Addon {
  std::mutex mutex;
  std::condition_variable wake;
  std::deque<Item*> queue;  // under mutex
  bool stopping = false;    // under mutex
  std::thread thread;       // started with the first buffer (event loop only)
  napi_threadsafe_function done = nullptr;
  size_t outstanding = 0;   // buffers of all streams whose callback has not run (event loop only)
};

bool Check(napi_env env, napi_status status, const char* what) {
  if (status == napi_ok) return true;
  bool pending = false;
  napi_is_exception_pending(env, &pending);
  if (!pending) napi_throw_error(env, "ERR_SHA256_ADDON", what);
  return false;
}

void FinalizeStream(napi_env, void* data, void*) { delete static_cast<Stream*>(data); }

// The Stream behind an external made by Open; null (an exception pending) for anything else.
Stream* StreamOf(napi_env env, napi_value value) {
  napi_valuetype type;
  if (!Check(env, napi_typeof(env, value, &type), "bad stream")) return nullptr;
  void* data = nullptr;
  if (type != napi_external || !Check(env, napi_get_value_external(env, value, &data), "bad stream") || data == nullptr) {
    napi_throw_type_error(env, "ERR_SHA256_ADDON", "not a sha256 stream");
    return nullptr;
  }
  return static_cast<Stream*>(data);
}

// The bytes of a Uint8Array; false (an exception pending) for anything else.
bool BytesOf(napi_env env, napi_value value, const uint8_t** bytes, size_t* length) {
  bool is_typed = false;
  if (!Check(env, napi_is_typedarray(env, value, &is_typed), "bad data")) return false;
  napi_typedarray_type type;
  void* data = nullptr;
  if (!is_typed || !Check(env, napi_get_typedarray_info(env, value, &type, length, &data, nullptr, nullptr), "bad data") ||
      type != napi_uint8_array) {
    napi_throw_type_error(env, "ERR_SHA256_ADDON", "data must be a Uint8Array");
    return false;
  }
  *bytes = static_cast<const uint8_t*>(data);
  return true;
}

// The arguments of a call on a stream (at least `want`, the stream first) and that stream, still
// taking updates; null (an exception pending) otherwise.
Stream* StreamCall(napi_env env, napi_callback_info info, size_t want, napi_value* argv, const char* usage) {
  size_t argc = want;
  if (!Check(env, napi_get_cb_info(env, info, &argc, argv, nullptr, nullptr), "bad call")) return nullptr;
  if (argc < want) {
    napi_throw_type_error(env, "ERR_SHA256_ADDON", usage);
    return nullptr;
  }
  Stream* s = StreamOf(env, argv[0]);
  if (s != nullptr && s->finished) {
    napi_throw_error(env, "ERR_SHA256_ADDON", "the stream's digest was already taken");
    return nullptr;
  }
  return s;
}

// Deletes an item and the references it holds (any not made yet are null). Event loop only.
void Discard(napi_env env, Item* item) {
  if (item->callback_ref != nullptr) napi_delete_reference(env, item->callback_ref);
  if (item->data_ref != nullptr) napi_delete_reference(env, item->data_ref);
  if (item->stream_ref != nullptr) napi_delete_reference(env, item->stream_ref);
  delete item;
}

// Drops an item's references and calls its callback (with the saved state, for a snapshot). Event loop only.
void Settle(napi_env env, Item* item) {
  napi_value callback = nullptr;
  napi_get_reference_value(env, item->callback_ref, &callback);
  napi_value argv[1];
  size_t argc = 0;
  if (item->snapshot) {
    void* copy = nullptr;
    if (napi_create_buffer_copy(env, item->state_length, item->state, &copy, &argv[0]) == napi_ok) argc = 1;
  }
  Discard(env, item);
  if (callback == nullptr) return;
  napi_value undefined;
  napi_get_undefined(env, &undefined);
  napi_call_function(env, undefined, callback, argc, argv, nullptr);
}

// The thread-safe function's call: a buffer was hashed. env is null while the environment goes away.
void CallDone(napi_env env, napi_value, void*, void* data) {
  Item* item = static_cast<Item*>(data);
  if (env == nullptr) {
    delete item;
    return;
  }
  item->stream->outstanding--;
  Addon* addon = nullptr;
  napi_get_instance_data(env, reinterpret_cast<void**>(&addon));
  if (--addon->outstanding == 0) napi_unref_threadsafe_function(env, addon->done);
  Settle(env, item);
}

// The hashing thread: takes buffers in the order given until the environment goes away.
void Run(Addon* addon) {
  for (;;) {
    Item* item;
    {
      std::unique_lock<std::mutex> lock(addon->mutex);
      addon->wake.wait(lock, [addon] { return addon->stopping || !addon->queue.empty(); });
      if (addon->stopping) return;
      item = addon->queue.front();
      addon->queue.pop_front();
    }
    if (item->snapshot) item->state_length = SaveState(item->stream->ctx, item->state);
    else SHA256_Update(&item->stream->ctx, item->bytes, item->length);
    if (napi_call_threadsafe_function(addon->done, item, napi_tsfn_nonblocking) != napi_ok) delete item;  // the environment is closing
  }
}

// At environment teardown: the thread stops (what it had not hashed is dropped with the environment).
void Stop(void* data) {
  Addon* addon = static_cast<Addon*>(data);
  {
    std::lock_guard<std::mutex> lock(addon->mutex);
    addon->stopping = true;
  }
  addon->wake.notify_one();
  if (addon->thread.joinable()) addon->thread.join();
  for (Item* item : addon->queue) delete item;
  addon->queue.clear();
}

// open([state]): a new running sha256, or one going on from a saved state (snapshot).
napi_value Open(napi_env env, napi_callback_info info) {
  napi_value argv[1];
  size_t argc = 1;
  if (!Check(env, napi_get_cb_info(env, info, &argc, argv, nullptr, nullptr), "bad call")) return nullptr;
  const uint8_t* saved = nullptr;
  size_t saved_length = 0;
  if (argc >= 1) {
    napi_valuetype type;
    if (!Check(env, napi_typeof(env, argv[0], &type), "bad state")) return nullptr;
    if (type != napi_undefined && !BytesOf(env, argv[0], &saved, &saved_length)) return nullptr;
  }
  Stream* s = new (std::nothrow) Stream();
  if (s == nullptr) {
    napi_throw_error(env, "ERR_SHA256_ADDON", "out of memory");
    return nullptr;
  }
  if (saved == nullptr) {
    SHA256_Init(&s->ctx);
  } else if (!LoadState(saved, saved_length, &s->ctx)) {
    delete s;
    napi_throw_range_error(env, "ERR_SHA256_ADDON", "not a saved sha256 state");
    return nullptr;
  }
  napi_value external;
  if (!Check(env, napi_create_external(env, s, FinalizeStream, nullptr, &external), "open failed")) {
    delete s;
    return nullptr;
  }
  return external;
}

// Queues an item for the hashing thread (its references made); false (an exception pending) otherwise.
bool Enqueue(napi_env env, Stream* s, Item* item, napi_value stream, napi_value data, napi_value callback) {
  napi_valuetype type;
  if (!Check(env, napi_typeof(env, callback, &type), "bad callback") || type != napi_function) {
    delete item;
    napi_throw_type_error(env, "ERR_SHA256_ADDON", "callback must be a function");
    return false;
  }
  bool ok = Check(env, napi_create_reference(env, stream, 1, &item->stream_ref), "update failed") &&
            (data == nullptr || Check(env, napi_create_reference(env, data, 1, &item->data_ref), "update failed")) &&
            Check(env, napi_create_reference(env, callback, 1, &item->callback_ref), "update failed");
  if (!ok) {
    Discard(env, item);
    return false;
  }
  item->stream = s;
  Addon* addon = nullptr;
  napi_get_instance_data(env, reinterpret_cast<void**>(&addon));
  if (!addon->thread.joinable()) {
    try {
      addon->thread = std::thread(Run, addon);
    } catch (...) {
      Discard(env, item);
      napi_throw_error(env, "ERR_SHA256_ADDON", "the hashing thread did not start");
      return false;
    }
  }
  s->outstanding++;
  // While buffers are out the process stays alive for their callbacks, as for any pending I/O.
  if (addon->outstanding++ == 0) napi_ref_threadsafe_function(env, addon->done);
  {
    std::lock_guard<std::mutex> lock(addon->mutex);
    addon->queue.push_back(item);
  }
  addon->wake.notify_one();
  return true;
}

Item* NewItem(napi_env env) {
  Item* item = new (std::nothrow) Item();
  if (item == nullptr) napi_throw_error(env, "ERR_SHA256_ADDON", "out of memory");
  return item;
}

// update(stream, data, callback): callback() runs on the event loop once data is no longer read.
// Buffers may be given without waiting: they are hashed in order.
napi_value Update(napi_env env, napi_callback_info info) {
  napi_value argv[3];
  Stream* s = StreamCall(env, info, 3, argv, "update(stream, data, callback)");
  if (s == nullptr) return nullptr;
  const uint8_t* bytes;
  size_t length;
  if (!BytesOf(env, argv[1], &bytes, &length)) return nullptr;
  Item* item = NewItem(env);
  if (item == nullptr) return nullptr;
  item->bytes = bytes;
  item->length = length;
  Enqueue(env, s, item, argv[0], argv[1], argv[2]);
  return nullptr;
}

// snapshot(stream, callback): callback(state) runs on the event loop with the stream's saved state
// after every buffer given before this call (and none given after), for open(state) to go on from.
napi_value Snapshot(napi_env env, napi_callback_info info) {
  napi_value argv[2];
  Stream* s = StreamCall(env, info, 2, argv, "snapshot(stream, callback)");
  if (s == nullptr) return nullptr;
  Item* item = NewItem(env);
  if (item == nullptr) return nullptr;
  item->snapshot = true;
  Enqueue(env, s, item, argv[0], nullptr, argv[1]);
  return nullptr;
}

// digest(stream): the hex digest of everything hashed; the stream takes no more updates.
napi_value Digest(napi_env env, napi_callback_info info) {
  napi_value argv[1];
  Stream* s = StreamCall(env, info, 1, argv, "digest(stream)");
  if (s == nullptr) return nullptr;
  if (s->outstanding > 0) {
    napi_throw_error(env, "ERR_SHA256_ADDON", "digest before every update has called back");
    return nullptr;
  }
  s->finished = true;
  unsigned char md[SHA256_DIGEST_LENGTH];
  SHA256_Final(md, &s->ctx);
  static const char kHex[] = "0123456789abcdef";
  char hex[2 * SHA256_DIGEST_LENGTH];
  for (int i = 0; i < SHA256_DIGEST_LENGTH; i++) {
    hex[2 * i] = kHex[md[i] >> 4];
    hex[2 * i + 1] = kHex[md[i] & 15];
  }
  napi_value out;
  if (!Check(env, napi_create_string_latin1(env, hex, sizeof hex, &out), "digest failed")) return nullptr;
  return out;
}

void FinalizeAddon(napi_env, void* data, void*) {
  Stop(data);  // already stopped by the cleanup hook, which runs first; never leave a joinable thread
  delete static_cast<Addon*>(data);
}

napi_value Init(napi_env env, napi_value exports) {
  Addon* addon = new (std::nothrow) Addon();
  if (addon == nullptr) {
    napi_throw_error(env, "ERR_SHA256_ADDON", "out of memory");
    return nullptr;
  }
  napi_value name;
  bool ok = Check(env, napi_create_string_utf8(env, "stowage.sha256.done", NAPI_AUTO_LENGTH, &name), "init failed") &&
            Check(env, napi_create_threadsafe_function(env, nullptr, nullptr, name, 0, 1, nullptr, nullptr, nullptr, CallDone, &addon->done), "init failed") &&
            // Referenced only while buffers are out (Update, CallDone): an idle addon never keeps the process alive.
            Check(env, napi_unref_threadsafe_function(env, addon->done), "init failed") &&
            Check(env, napi_set_instance_data(env, addon, FinalizeAddon, nullptr), "init failed") &&
            Check(env, napi_add_env_cleanup_hook(env, Stop, addon), "init failed");
  if (!ok) {
    delete addon;
    return nullptr;
  }
  napi_property_descriptor props[] = {
      {"open", nullptr, Open, nullptr, nullptr, nullptr, napi_enumerable, nullptr},
      {"update", nullptr, Update, nullptr, nullptr, nullptr, napi_enumerable, nullptr},
      {"snapshot", nullptr, Snapshot, nullptr, nullptr, nullptr, napi_enumerable, nullptr},
      {"digest", nullptr, Digest, nullptr, nullptr, nullptr, napi_enumerable, nullptr},
  };
  if (!Check(env, napi_define_properties(env, exports, sizeof props / sizeof props[0], props), "init failed")) return nullptr;
  return exports;
}

}  // namespace

NAPI_MODULE(NODE_GYP_MODULE_NAME, Init)
