// admission_front: a gRPC front that takes calls in without Python's GIL and refuses the excess at once.
//
// It listens on --listen and forwards every call, unary or streaming, byte for byte with its metadata,
// deadline and status, to the Python server at --backend (on loopback), the caller's address added as
// x-predictor-peer metadata (so that the backend checks the caller's address, not the front's). Calls to
// the methods named by --limited (the answers, all unary: predictor serve names PredictLatency,
// CheckDeadline, RankPlacements, PlanPipeline and GetStatus) are admitted while fewer than --limit of
// them are in flight to the backend; beyond that each is refused with RESOURCE_EXHAUSTED before its
// message is read. Intake and refusals run on gRPC's C++ threads, so a Python server busy
// answering (holding its GIL) cannot delay them; the backend keeps its own shedding by time.
//
// Build: make front (g++ and Debian's libgrpc++-dev). Run: predictor serve --front (which starts it).
// Prints "listening on PORT" once it accepts calls; exits 2 naming the address when it cannot bind it.

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/support/byte_buffer.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>

namespace {

struct Options {
  std::string listen = "127.0.0.1:0";
  std::string backend;
  int limit = 4;
  std::set<std::string> limited;
};

std::atomic<bool> stopping{false};

// The metadata key the caller's own address is passed to the backend under
// (predictor.rpc.security.FRONT_PEER_KEY); a caller's own value of it is dropped.
const char kPeerKey[] = "x-predictor-peer";

void on_signal(int) { stopping = true; }

bool forwarded_header(const std::string& key) {
  // gRPC sets these itself on the forwarded call
  return !(key.empty() || key[0] == ':' || key.rfind("grpc-", 0) == 0 || key == "user-agent" ||
           key == "content-type" || key == "te");
}

// The backend's call as the caller's: its metadata (the caller's own x-predictor-peer dropped), the
// caller's address as x-predictor-peer, and its deadline.
void ask_as_caller(grpc::GenericCallbackServerContext* server, grpc::ClientContext* backend) {
  for (const auto& [key, value] : server->client_metadata()) {
    std::string k(key.data(), key.size());
    if (forwarded_header(k) && k != kPeerKey) backend->AddMetadata(k, std::string(value.data(), value.size()));
  }
  backend->AddMetadata(kPeerKey, server->peer());
  if (server->deadline() != std::chrono::system_clock::time_point::max()) backend->set_deadline(server->deadline());
}

// The backend's trailing metadata, passed on to the caller.
void pass_trailers(const grpc::ClientContext& backend, grpc::GenericCallbackServerContext* server) {
  for (const auto& [key, value] : backend.GetServerTrailingMetadata()) {
    std::string k(key.data(), key.size());
    if (forwarded_header(k)) server->AddTrailingMetadata(k, std::string(value.data(), value.size()));
  }
}

// One call: the server side (what the caller sent the front) and the client side (the front's call to
// the backend). The caller's messages are read one at a time, each written to the backend before the
// next is read; the backend's responses are read as they come and queued for the caller. The client
// side is held open while the caller may still send; the server side finishes with the backend's status
// once every response is written. Deleted once both sides are done.
class Proxy : public grpc::ServerGenericBidiReactor {
 public:
  Proxy(grpc::GenericCallbackServerContext* server, grpc::GenericStub* stub)
      : server_(server), client_(this) {
    ask_as_caller(server, &context_);
    stub->PrepareBidiStreamingCall(&context_, server->method(), grpc::StubOptions(), &client_);
    client_.AddHold();  // while the caller may still send (released by ReleaseSending)
    client_.StartRead(&incoming_);
    client_.StartCall();
    StartRead(&request_);
  }

  // the caller's side
  void OnReadDone(bool ok) override {
    if (ok) {
      client_.StartWrite(&request_);
    } else {
      client_.StartWritesDone();
      ReleaseSending();
    }
  }

  void OnWriteDone(bool ok) override {
    grpc::ByteBuffer* next = nullptr;
    bool finish = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      responses_.pop_front();
      if (ok && !responses_.empty()) {
        next = &responses_.front();  // a deque keeps its elements in place as others are added
      } else {
        writing_ = false;
        finish = backend_done_;
      }
    }
    if (next != nullptr) StartWrite(next);
    if (finish) Finish(status_);
  }

  void OnCancel() override { context_.TryCancel(); }

  void OnDone() override { Release(); }

  // the backend's side
  void BackendWriteDone(bool ok) {
    if (ok) {
      StartRead(&request_);
    } else {
      ReleaseSending();  // the backend takes no more: the caller's further messages are not read
    }
  }

  void BackendReadDone(bool ok) {
    if (!ok) return;
    grpc::ByteBuffer* first = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      responses_.emplace_back();
      responses_.back().Swap(&incoming_);
      if (!writing_) {
        writing_ = true;
        first = &responses_.front();
      }
    }
    if (first != nullptr) StartWrite(first);
    client_.StartRead(&incoming_);
  }

  void BackendDone(const grpc::Status& status) {
    pass_trailers(context_, server_);
    bool finish;
    {
      std::lock_guard<std::mutex> lock(mu_);
      backend_done_ = true;
      status_ = status;
      finish = !writing_;
    }
    if (finish) Finish(status_);
  }

  // Two owners: the server side and the client side; the last one out deletes the call.
  void Release() {
    if (owners_.fetch_sub(1) == 1) delete this;
  }

 private:
  class Client : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
   public:
    explicit Client(Proxy* proxy) : proxy_(proxy) {}
    void OnWriteDone(bool ok) override { proxy_->BackendWriteDone(ok); }
    void OnReadDone(bool ok) override { proxy_->BackendReadDone(ok); }
    void OnDone(const grpc::Status& status) override {
      proxy_->BackendDone(status);
      proxy_->Release();
    }

   private:
    Proxy* proxy_;
  };

  void ReleaseSending() {
    if (!sending_released_.exchange(true)) client_.RemoveHold();
  }

  grpc::GenericCallbackServerContext* server_;
  grpc::ClientContext context_;
  Client client_;
  grpc::ByteBuffer request_;
  grpc::ByteBuffer incoming_;
  std::mutex mu_;
  std::deque<grpc::ByteBuffer> responses_;  // the front one being written to the caller
  bool writing_ = false;
  bool backend_done_ = false;
  grpc::Status status_;
  std::atomic<bool> sending_released_{false};
  std::atomic<int> owners_{2};
};

// An answer (a unary call of --limited): its one message read, passed on by one unary call to the
// backend, the response written with the backend's status. Fewer steps than a stream's (Proxy).
class UnaryProxy : public grpc::ServerGenericBidiReactor {
 public:
  UnaryProxy(grpc::GenericCallbackServerContext* server, grpc::GenericStub* stub, std::atomic<int>* in_flight)
      : server_(server), stub_(stub), in_flight_(in_flight) {
    ask_as_caller(server, &context_);
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the caller sent no message (or is gone): the backend is never asked
      in_flight_->fetch_sub(1);
      Release();
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the call ended before its request arrived"));
      return;
    }
    stub_->UnaryCall(&context_, server_->method(), grpc::StubOptions(), &request_, &response_,
                     [this](grpc::Status status) { BackendDone(std::move(status)); });
  }

  void OnCancel() override { context_.TryCancel(); }

  void OnDone() override { Release(); }

 private:
  void BackendDone(grpc::Status status) {
    pass_trailers(context_, server_);
    in_flight_->fetch_sub(1);
    if (status.ok()) {
      StartWriteAndFinish(&response_, grpc::WriteOptions(), status);
    } else {
      Finish(status);
    }
    Release();
  }

  // Two owners once the backend is asked: the server side and the backend's callback.
  void Release() {
    if (owners_.fetch_sub(1) == 1) delete this;
  }

  grpc::GenericCallbackServerContext* server_;
  grpc::GenericStub* stub_;
  std::atomic<int>* in_flight_;
  grpc::ClientContext context_;
  grpc::ByteBuffer request_;
  grpc::ByteBuffer response_;
  std::atomic<int> owners_{2};
};

class Refusal : public grpc::ServerGenericBidiReactor {
 public:
  explicit Refusal(int limit) {
    std::ostringstream message;
    message << "overloaded: " << limit << " answers in flight at the front; retry later or fall back";
    Finish(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, message.str()));
  }
  void OnDone() override { delete this; }
};

class Front : public grpc::CallbackGenericService {
 public:
  Front(std::shared_ptr<grpc::Channel> backend, Options options)
      : stub_(std::move(backend)), options_(std::move(options)) {}

  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext* context) override {
    if (options_.limited.count(context->method()) == 0) return new Proxy(context, &stub_);
    if (in_flight_.fetch_add(1) >= options_.limit) {
      in_flight_.fetch_sub(1);
      refused_.fetch_add(1);
      return new Refusal(options_.limit);
    }
    return new UnaryProxy(context, &stub_, &in_flight_);
  }

  long refused() const { return refused_.load(); }

 private:
  grpc::GenericStub stub_;
  Options options_;
  std::atomic<int> in_flight_{0};
  std::atomic<long> refused_{0};
};

int usage(const char* problem) {
  std::fprintf(stderr,
               "admission_front: %s\nusage: admission_front --backend HOST:PORT [--listen HOST:PORT] "
               "[--limit N] [--limited /package.Service/Method ...]\n",
               problem);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&](const char* name) -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "admission_front: %s needs a value\n", name);
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--listen") {
      options.listen = value("--listen");
    } else if (arg == "--backend") {
      options.backend = value("--backend");
    } else if (arg == "--limit") {
      options.limit = std::atoi(value("--limit"));
    } else if (arg == "--limited") {
      options.limited.insert(value("--limited"));
    } else {
      return usage(("unknown argument " + arg).c_str());
    }
  }
  if (options.backend.empty()) return usage("--backend is required");
  if (options.limit < 1) return usage("--limit must be at least 1");

  grpc::ChannelArguments channel_args;
  channel_args.SetMaxReceiveMessageSize(-1);
  channel_args.SetMaxSendMessageSize(-1);
  auto channel = grpc::CreateCustomChannel(options.backend, grpc::InsecureChannelCredentials(), channel_args);
  Front front(channel, options);

  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);  // a port in use is refused, not shared
  builder.SetMaxReceiveMessageSize(-1);
  builder.SetMaxSendMessageSize(-1);
  builder.AddListeningPort(options.listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterCallbackGenericService(&front);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    std::fprintf(stderr, "admission_front: cannot listen on %s (in use, or not an address of this host)\n",
                 options.listen.c_str());
    return 2;
  }
  std::printf("listening on %d\n", port);
  std::fflush(stdout);
  std::signal(SIGTERM, on_signal);
  std::signal(SIGINT, on_signal);
  while (!stopping) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  std::fprintf(stderr, "admission_front: stopped; %ld calls refused\n", front.refused());
  return 0;
}
