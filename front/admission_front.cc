// admission_front: a gRPC front that takes calls in without Python's GIL and refuses the excess at once.
//
// It listens on --listen and forwards every call, unary or streaming, byte for byte with its metadata,
// deadline and status, to the Python server at --backend (a private Unix socket, or loopback), the
// caller's address added as x-predictor-peer metadata (so that the backend checks the caller's
// address, not the front's). Calls to the methods named by --limited (the answers, all unary:
// predictor serve names PredictLatency, CheckDeadline, RankPlacements, PlanPipeline and GetStatus) are
// admitted while fewer than --limit of them are in flight to the backend; beyond that each is refused
// with RESOURCE_EXHAUSTED before its message is read. Intake and refusals run in C++, so a Python server busy answering (holding its GIL)
// cannot delay them; the backend keeps its own shedding by time.
//
// One thread drives every call, both sides, through one completion queue (gRPC's asynchronous API):
// no call hops between threads, which is most of what a proxy on gRPC's callback API spends.
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
#include <memory>
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

// Calls waiting to be taken in at any time (each one that arrives puts a new one in its place).
constexpr int kWaiting = 16;

void on_signal(int) { stopping = true; }

// The metadata key the caller's own address is passed to the backend under
// (predictor.rpc.security.FRONT_PEER_KEY); a caller's own value of it is dropped.
const char kPeerKey[] = "x-predictor-peer";

bool forwarded_header(const std::string& key) {
  // gRPC sets these itself on the forwarded call
  return !(key.empty() || key[0] == ':' || key.rfind("grpc-", 0) == 0 || key == "user-agent" ||
           key == "content-type" || key == "te");
}

// What every call shares: the queue, the backend, the limit and the answers in flight (one thread
// touches them: no locks).
struct Front {
  grpc::AsyncGenericService service;
  std::unique_ptr<grpc::ServerCompletionQueue> queue;
  std::unique_ptr<grpc::GenericStub> stub;
  Options options;
  int in_flight = 0;
  long refused = 0;
};

// One call through the front: the caller's side (stream) and the backend's (a stream, or for an
// answer one unary call). Each operation's completion comes back as one of its Step tags; the call
// is deleted once nothing of it is pending and both its end and gRPC's "done" have come back.
class Call {
 public:
  enum Step { kArrived, kDone, kCallerRead, kCallerWritten, kCallerFinished, kBackendStarted, kBackendRead,
              kBackendWritten, kBackendWritesDone, kBackendFinished, kAnswered, kSteps };

  struct Tag {
    Call* call;
    Step step;
  };

  explicit Call(Front* front) : front_(front), stream_(&server_) {
    for (int i = 0; i < kSteps; ++i) tags_[i] = Tag{this, static_cast<Step>(i)};
    server_.AsyncNotifyWhenDone(Await(kDone));
    front_->service.RequestCall(&server_, &stream_, front_->queue.get(), front_->queue.get(), Await(kArrived));
  }

  // One completion; true once the call may be deleted.
  bool Proceed(Step step, bool ok) {
    --pending_;
    switch (step) {
      case kArrived:
        if (!ok) {  // shutting down: no call came
          ended_ = done_ = true;
          break;
        }
        new Call(front_);  // the next call's place
        Arrived();
        break;
      case kDone:
        done_ = true;
        if (server_.IsCancelled() && backend_started_) backend_.TryCancel();
        break;
      case kCallerRead:
        CallerRead(ok);
        break;
      case kCallerWritten:
        if (ok) {
          client_->Read(&response_, Await(kBackendRead));
        } else {  // the caller is gone
          backend_.TryCancel();
          client_->Finish(&status_, Await(kBackendFinished));
        }
        break;
      case kCallerFinished:
        ended_ = true;
        break;
      case kBackendStarted:
        if (ok) {
          client_->Read(&response_, Await(kBackendRead));
          stream_.Read(&request_, Await(kCallerRead));
        } else {
          client_->Finish(&status_, Await(kBackendFinished));
        }
        break;
      case kBackendRead:
        if (ok) {
          stream_.Write(response_, Await(kCallerWritten));
        } else {
          client_->Finish(&status_, Await(kBackendFinished));
        }
        break;
      case kBackendWritten:
        if (ok) stream_.Read(&request_, Await(kCallerRead));  // else the backend ended: its Read says so
        break;
      case kBackendWritesDone:
        break;
      case kBackendFinished:
        backend_finished_ = true;
        [[fallthrough]];
      case kAnswered:
        if (step == kAnswered) --front_->in_flight;
        PassTrailers();
        if (step == kAnswered && status_.ok()) {
          stream_.WriteAndFinish(response_, grpc::WriteOptions(), status_, Await(kCallerFinished));
        } else {
          stream_.Finish(status_, Await(kCallerFinished));
        }
        break;
      case kSteps:
        break;
    }
    return pending_ == 0 && ended_ && done_;
  }

 private:
  void* Await(Step step) {
    ++pending_;
    return &tags_[step];
  }

  void Arrived() {
    answer_ = front_->options.limited.count(server_.method()) > 0;
    if (!answer_) {  // a stream, a write or a state operation: passed on as a stream
      AskAsCaller();
      client_ = front_->stub->PrepareCall(&backend_, server_.method(), front_->queue.get());
      backend_started_ = true;
      client_->StartCall(Await(kBackendStarted));
      return;
    }
    if (front_->in_flight >= front_->options.limit) {
      ++front_->refused;
      std::ostringstream message;
      message << "overloaded: " << front_->options.limit << " answers in flight at the front; retry later or fall back";
      stream_.Finish(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, message.str()), Await(kCallerFinished));
      return;
    }
    ++front_->in_flight;
    stream_.Read(&request_, Await(kCallerRead));
  }

  void CallerRead(bool ok) {
    if (!answer_) {
      if (backend_finished_) return;  // the backend ended the call first: nothing more goes to it
      if (ok) {
        client_->Write(request_, Await(kBackendWritten));
      } else {
        client_->WritesDone(Await(kBackendWritesDone));
      }
      return;
    }
    if (!ok) {  // the caller sent no message, or is gone: the backend is never asked
      --front_->in_flight;
      stream_.Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the call ended before its request arrived"),
                     Await(kCallerFinished));
      return;
    }
    AskAsCaller();
    unary_ = front_->stub->PrepareUnaryCall(&backend_, server_.method(), request_, front_->queue.get());
    backend_started_ = true;
    unary_->StartCall();
    unary_->Finish(&response_, &status_, Await(kAnswered));
  }

  // The backend's call as the caller's: its metadata (the caller's own x-predictor-peer dropped), the
  // caller's address as x-predictor-peer, and its deadline.
  void AskAsCaller() {
    for (const auto& [key, value] : server_.client_metadata()) {
      std::string k(key.data(), key.size());
      if (forwarded_header(k) && k != kPeerKey) backend_.AddMetadata(k, std::string(value.data(), value.size()));
    }
    backend_.AddMetadata(kPeerKey, server_.peer());
    if (server_.deadline() != std::chrono::system_clock::time_point::max()) backend_.set_deadline(server_.deadline());
  }

  // The backend's trailing metadata, passed on to the caller.
  void PassTrailers() {
    for (const auto& [key, value] : backend_.GetServerTrailingMetadata()) {
      std::string k(key.data(), key.size());
      if (forwarded_header(k)) server_.AddTrailingMetadata(k, std::string(value.data(), value.size()));
    }
  }

  Front* front_;
  grpc::GenericServerContext server_;
  grpc::GenericServerAsyncReaderWriter stream_;
  grpc::ClientContext backend_;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> client_;
  std::unique_ptr<grpc::GenericClientAsyncResponseReader> unary_;
  grpc::ByteBuffer request_;
  grpc::ByteBuffer response_;
  grpc::Status status_;
  Tag tags_[kSteps];
  int pending_ = 0;
  bool answer_ = false;
  bool backend_started_ = false;
  bool backend_finished_ = false;
  bool ended_ = false;
  bool done_ = false;
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
  Front front;
  Options& options = front.options;
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
  front.stub = std::make_unique<grpc::GenericStub>(
      grpc::CreateCustomChannel(options.backend, grpc::InsecureChannelCredentials(), channel_args));

  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);  // a port in use is refused, not shared
  builder.SetMaxReceiveMessageSize(-1);
  builder.SetMaxSendMessageSize(-1);
  builder.AddListeningPort(options.listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterAsyncGenericService(&front.service);
  front.queue = builder.AddCompletionQueue();
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    std::fprintf(stderr, "admission_front: cannot listen on %s (in use, or not an address of this host)\n",
                 options.listen.c_str());
    return 2;
  }
  std::thread driver([&front] {
    for (int i = 0; i < kWaiting; ++i) new Call(&front);  // calls the queue takes in at once
    void* tag;
    bool ok;
    while (front.queue->Next(&tag, &ok)) {
      auto* t = static_cast<Call::Tag*>(tag);
      if (t->call->Proceed(t->step, ok)) delete t->call;
    }
  });
  std::printf("listening on %d\n", port);
  std::fflush(stdout);
  std::signal(SIGTERM, on_signal);
  std::signal(SIGINT, on_signal);
  while (!stopping) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  front.queue->Shutdown();
  driver.join();
  std::fprintf(stderr, "admission_front: stopped; %ld calls refused\n", front.refused);
  return 0;
}
