#include "gryph/testing/topology.h"

#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "gryph/memory_storage.h"
#include "lib/util/status_macros.h"

namespace gryph {

Topology::Topology(TopologyOptions options)
    : options_(std::move(options)), now_(options_.real_time ? absl::Now() : options_.start) {}

Topology::~Topology() {
  // Subscribers first, then the SHBs, then the PHB: each may still send to the next while it goes.
  processes_.clear();
  shbs_.clear();
  phb_.reset();
}

absl::StatusOr<std::unique_ptr<Topology>> Topology::Create(TopologyOptions options) {
  if (options.pubends.empty()) return absl::InvalidArgumentError("a topology needs a pubend");
  if (options.shbs.empty()) return absl::InvalidArgumentError("a topology needs an SHB");
  std::unique_ptr<Topology> t(new Topology(std::move(options)));
  GRYPH_RETURN_IF_ERROR(t->Open());
  return t;
}

absl::StatusOr<std::unique_ptr<Storage>> Topology::NewStorage(const std::string& name) const {
  if (options_.storage_dir.empty()) return std::make_unique<MemoryStorage>();
  StorageOptions so = options_.storage;
  so.path = options_.storage_dir + "/" + name;
  std::error_code ec;
  std::filesystem::create_directories(so.path, ec);
  if (ec) return absl::InternalError(absl::StrCat("creating ", so.path, ": ", ec.message()));
  return OpenLmdbStorage(so);
}

absl::Status Topology::Open() {
  auto clock = [this] { return now_; };
  GRYPH_ASSIGN_OR_RETURN(phb_channel_, net_.Connect("phb"));
  GRYPH_ASSIGN_OR_RETURN(phb_storage_, NewStorage("phb"));
  PublisherHostingBrokerOptions po;
  if (options_.phb_options) options_.phb_options(po);
  po.pubends.clear();
  for (PubendId p : options_.pubends) {
    PubendOptions o;
    if (options_.pubend_options) options_.pubend_options(o);
    o.id = p;
    po.pubends.push_back(o);
  }
  po.downstream = options_.shbs;
  po.commit_thread = false;
  po.clock = clock;
  GRYPH_ASSIGN_OR_RETURN(phb_,
                         PublisherHostingBroker::Open(po, phb_storage_.get(), phb_channel_.get()));
  for (const std::string& name : options_.shbs) GRYPH_RETURN_IF_ERROR(OpenShb(name));
  return absl::OkStatus();
}

absl::Status Topology::OpenShb(const std::string& name) {
  // Built aside and added whole: an SHB that fails to open (a damaged store) leaves no entry.
  Shb shb;
  GRYPH_ASSIGN_OR_RETURN(shb.channel, net_.Connect(name));
  GRYPH_ASSIGN_OR_RETURN(shb.storage, NewStorage(name));
  SubscriberHostingBrokerOptions so;
  if (options_.shb_options) options_.shb_options(so);
  so.pubends.clear();
  for (PubendId p : options_.pubends) so.pubends.push_back({p, "phb"});
  so.clock = [this] { return now_; };
  GRYPH_ASSIGN_OR_RETURN(shb.broker,
                         SubscriberHostingBroker::Open(so, shb.storage.get(), shb.channel.get()));
  shbs_[name] = std::move(shb);
  return absl::OkStatus();
}

void Topology::CrashShb(const std::string& name) {
  auto it = shbs_.find(name);
  if (it == shbs_.end()) return;
  // The broker, then its storage, then its endpoint (with what was queued for it).
  it->second.broker.reset();
  it->second.storage.reset();
  it->second.channel.reset();
  shbs_.erase(it);
}

absl::Status Topology::RestartShb(const std::string& name) {
  if (options_.storage_dir.empty()) {
    return absl::FailedPreconditionError("an SHB on memory storage cannot restart");
  }
  CrashShb(name);
  return OpenShb(name);
}

absl::StatusOr<DurableSubscriber*> Topology::StartSubscriber(DurableSubscriberOptions options,
                                                             DurableSubscriber::Handler* handler) {
  Process process;
  process.endpoint = absl::StrCat("app-", ++started_);
  GRYPH_ASSIGN_OR_RETURN(process.channel, net_.Connect(process.endpoint));
  GRYPH_ASSIGN_OR_RETURN(
      process.subscriber,
      DurableSubscriber::Create(std::move(options), process.channel.get(), handler));
  DurableSubscriber* raw = process.subscriber.get();
  process.channel->SetReceiver(
      [raw](absl::string_view from, Message m) { raw->HandleMessage(from, m); });
  GRYPH_RETURN_IF_ERROR(raw->Connect());
  processes_.push_back(std::move(process));
  return raw;
}

void Topology::Crash(DurableSubscriber* subscriber) {
  for (auto it = processes_.begin(); it != processes_.end(); ++it) {
    if (it->subscriber.get() == subscriber) {
      // The process, then its endpoint (with the messages queued for it).
      it->subscriber.reset();
      it->channel.reset();
      processes_.erase(it);
      return;
    }
  }
}

void Topology::Publish(PubendId p, absl::string_view publisher, uint64_t sequence, EventRef event,
                       Pubend::PublishDone done) {
  if (done == nullptr) done = [](absl::StatusOr<Tick>) {};
  phb_->Publish(p, publisher, sequence, std::move(event), std::move(done));
}

void Topology::Run(absl::Duration d) {
  for (const absl::Time end = (options_.real_time ? absl::Now() : now_) + d; now_ < end;) Step();
}

void Topology::Step() {
  now_ = options_.real_time ? absl::Now() : now_ + options_.step;
  phb_->OnTimer(now_);
  net_.DeliverAll();
  for (auto& [name, shb] : shbs_) {
    while (shb.broker->Flush()) net_.DeliverAll();
    shb.broker->OnTimer(now_);
  }
  net_.DeliverAll();
  for (Process& p : processes_) p.subscriber->OnTimer(now_);
  net_.DeliverAll();
}

}  // namespace gryph
