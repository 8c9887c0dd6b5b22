#include "programs/admin_server.h"

#include <zmq.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace gryph::programs {
namespace {

std::string ZmqError(absl::string_view what) {
  return absl::StrCat(what, ": ", zmq_strerror(zmq_errno()));
}

}  // namespace

absl::StatusOr<std::unique_ptr<AdminServer>> AdminServer::Create(const std::string& endpoint,
                                                                 Handler handler) {
  void* context = zmq_ctx_new();
  if (context == nullptr) return absl::InternalError(ZmqError("zmq_ctx_new"));
  void* socket = zmq_socket(context, ZMQ_REP);
  const int64_t max_bytes = kMaxRequestBytes;
  const int linger = 0;
  zmq_setsockopt(socket, ZMQ_MAXMSGSIZE, &max_bytes, sizeof(max_bytes));
  zmq_setsockopt(socket, ZMQ_LINGER, &linger, sizeof(linger));
  if (zmq_bind(socket, endpoint.c_str()) != 0) {
    const int err = zmq_errno();
    const std::string message = absl::StrCat("admin endpoint ", endpoint, ": ", zmq_strerror(err));
    zmq_close(socket);
    zmq_ctx_term(context);
    return err == EADDRINUSE ? absl::UnavailableError(message)
                             : absl::InvalidArgumentError(message);
  }
  int fd = -1;
  size_t size = sizeof(fd);
  zmq_getsockopt(socket, ZMQ_FD, &fd, &size);
  return std::unique_ptr<AdminServer>(new AdminServer(context, socket, fd, std::move(handler)));
}

AdminServer::~AdminServer() {
  zmq_close(socket_);
  zmq_ctx_term(context_);
}

bool AdminServer::Dispatch(size_t max) {
  for (size_t i = 0; i < max; ++i) {
    zmq_msg_t request;
    zmq_msg_init(&request);
    if (zmq_msg_recv(&request, socket_, ZMQ_DONTWAIT) < 0) {
      zmq_msg_close(&request);
      return false;
    }
    const std::string text(static_cast<const char*>(zmq_msg_data(&request)),
                           zmq_msg_size(&request));
    zmq_msg_close(&request);
    const std::string answer = handler_(text);
    // A REP socket must answer before it takes the next request; a client that left meanwhile
    // is ZeroMQ's to forget.
    zmq_send(socket_, answer.data(), answer.size(), 0);
  }
  return Ready();
}

bool AdminServer::Ready() {
  int events = 0;
  size_t size = sizeof(events);
  return zmq_getsockopt(socket_, ZMQ_EVENTS, &events, &size) == 0 && (events & ZMQ_POLLIN);
}

absl::StatusOr<std::string> AdminRequest(const std::string& endpoint, const std::string& request,
                                         int timeout_ms) {
  void* context = zmq_ctx_new();
  void* socket = zmq_socket(context, ZMQ_REQ);
  const int linger = 0;
  zmq_setsockopt(socket, ZMQ_LINGER, &linger, sizeof(linger));
  zmq_setsockopt(socket, ZMQ_RCVTIMEO, &timeout_ms, sizeof(timeout_ms));
  zmq_setsockopt(socket, ZMQ_SNDTIMEO, &timeout_ms, sizeof(timeout_ms));
  absl::StatusOr<std::string> result;
  zmq_msg_t answer;
  zmq_msg_init(&answer);
  if (zmq_connect(socket, endpoint.c_str()) != 0) {
    result = absl::InvalidArgumentError(
        absl::StrCat("admin endpoint ", endpoint, ": ", zmq_strerror(zmq_errno())));
  } else if (zmq_send(socket, request.data(), request.size(), 0) < 0 ||
             zmq_msg_recv(&answer, socket, 0) < 0) {
    result = absl::DeadlineExceededError(
        absl::StrCat("no answer from ", endpoint, " within ", timeout_ms, " ms"));
  } else {
    result = std::string(static_cast<const char*>(zmq_msg_data(&answer)), zmq_msg_size(&answer));
  }
  zmq_msg_close(&answer);
  zmq_close(socket);
  zmq_ctx_term(context);
  return result;
}

}  // namespace gryph::programs
