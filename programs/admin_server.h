// AdminServer: the administration endpoint of a gryph program, served on its runtime's loop.
//
// A ZeroMQ REP socket bound to an endpoint of the operator's choosing takes one request per
// message — a command line such as "subscriptions" or "delete orders-audit" — and answers it with
// one message, the text `handler` returns (the programs answer JSON; gryph-admin is the client).
// The handler runs on the loop thread, between the nodes' work, so it may call any node of the
// runtime.
//
// Who can reach the endpoint can run every command, deletions included: bind it to an ipc://
// path in a directory only operators can enter (the file system is the authentication), or to
// loopback on a host whose users are trusted. It is never the nodes' channel.
//
// Thread-safety: owned by the loop thread once attached (Runtime::AddSource).

#ifndef GRYPH_PROGRAMS_ADMIN_SERVER_H_
#define GRYPH_PROGRAMS_ADMIN_SERVER_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gryph/runtime.h"

namespace gryph::programs {

class AdminServer final : public EventSource {
 public:
  using Handler = std::function<std::string(const std::string& request)>;

  // Binds `endpoint` (e.g. ipc:///run/gryph/shb.admin, tcp://127.0.0.1:7399). InvalidArgument
  // for an endpoint ZeroMQ does not take, Unavailable when the address is in use.
  static absl::StatusOr<std::unique_ptr<AdminServer>> Create(const std::string& endpoint,
                                                             Handler handler);
  ~AdminServer() override;
  AdminServer(const AdminServer&) = delete;
  AdminServer& operator=(const AdminServer&) = delete;

  // EventSource.
  void Attach(std::function<void()> wake) override { (void)wake; }
  std::vector<int> WaitFds() const override { return {fd_}; }
  bool Dispatch(size_t max) override;
  bool Ready() override;

  // Requests larger than this are refused by ZeroMQ (the peer is disconnected).
  static constexpr int kMaxRequestBytes = 4096;

 private:
  AdminServer(void* context, void* socket, int fd, Handler handler)
      : context_(context), socket_(socket), fd_(fd), handler_(std::move(handler)) {}

  void* const context_;
  void* const socket_;
  const int fd_;
  const Handler handler_;
};

// Sends `request` to the admin endpoint and returns the answer; DeadlineExceeded when none
// arrives within `timeout_ms`.
absl::StatusOr<std::string> AdminRequest(const std::string& endpoint, const std::string& request,
                                         int timeout_ms);

}  // namespace gryph::programs

#endif  // GRYPH_PROGRAMS_ADMIN_SERVER_H_
