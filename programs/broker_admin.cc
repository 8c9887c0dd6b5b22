#include "programs/broker_admin.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace gryph::programs {
namespace {

using Json = nlohmann::ordered_json;

constexpr const char* kShbCommands =
    "stats | subscriptions | subscription NAME | delete NAME | help";
constexpr const char* kOtherCommands = "stats | help";

std::string Error(absl::string_view what) { return Json{{"error", what}}.dump(); }

const char* StateName(SubscriptionStatus::State s) {
  switch (s) {
    case SubscriptionStatus::State::kDisconnected: return "disconnected";
    case SubscriptionStatus::State::kConnected: return "connected";
    case SubscriptionStatus::State::kCatchingUp: return "catching_up";
  }
  return "unknown";
}

Json ToJson(const SubscriptionStatus& s) {
  Json pubends = Json::array();
  for (const SubscriptionStatus::AtPubend& at : s.pubends) {
    pubends.push_back({{"pubend", at.pubend.value},
                       {"released", at.released},
                       {"latest_delivered", at.latest_delivered},
                       {"backlog_ticks", at.backlog_ticks},
                       {"sent_through", at.sent_through},
                       {"unacked_events", at.unacked_events},
                       {"catching_up", at.catching_up}});
  }
  Json j = {{"name", s.name},
            {"selector", s.selector},
            {"topic_filter", s.topic_filter},
            {"state", StateName(s.state)},
            {"session", s.session},
            {"epoch", s.epoch}};
  j["last_heard"] =
      s.last_heard == absl::InfinitePast()
          ? Json(nullptr)
          : Json(absl::FormatTime(absl::RFC3339_full, s.last_heard, absl::UTCTimeZone()));
  j["pubends"] = std::move(pubends);
  return j;
}

Json ChannelJson(const ZmqChannel& channel) {
  const ZmqChannel::Stats s = channel.stats();
  return {{"sent", s.sent},
          {"received", s.received},
          {"dropped_full", s.dropped_full},
          {"unreachable", s.unreachable},
          {"malformed", s.malformed},
          {"corrupted", s.corrupted},
          {"oversized", s.oversized},
          {"impersonations", s.impersonations},
          {"not_encodable", s.not_encodable},
          {"denied", s.denied}};
}

Json HistogramJson(const LatencyHistogram& h) {
  auto us = [&h](double p) { return absl::ToInt64Microseconds(h.Percentile(p)); };
  return {
      {"count", h.count()},
      {"mean_us",
       h.count() == 0 ? 0 : absl::ToInt64Microseconds(h.sum()) / static_cast<int64_t>(h.count())},
      {"p50_us", us(50)},
      {"p99_us", us(99)},
      {"p999_us", us(99.9)}};
}

Json CommitterJson(const GroupCommitter& committer) {
  const GroupCommitter::Stats s = committer.stats();
  return {{"groups", s.groups},
          {"records", s.records},
          {"max_group_records", s.max_group_records},
          {"commit_time", HistogramJson(s.commit_time)}};
}

Json ShbStats(SubscriberHostingBroker& shb) {
  const SubscriberHostingBroker::Stats& s = shb.stats();
  return {{"subscriptions", shb.subscription_count()},
          {"catching_up", shb.catching_up()},
          {"events_delivered", s.events_delivered},
          {"gaps_delivered", s.gaps_delivered},
          {"catchups_started", s.catchups_started},
          {"catchups_completed", s.catchups_completed},
          {"nacks_sent", s.nacks_sent},
          {"pfs_records", s.pfs_records},
          {"commits", s.commits},
          {"demotions", s.demotions},
          {"resent", s.resent},
          {"subscriptions_deleted", s.subscriptions_deleted},
          {"subscriptions_expired", s.subscriptions_expired},
          {"full_store_reopens", s.full_store_reopens},
          {"waiting_for_room", shb.waiting_for_room()},
          {"deliver_to_ack", HistogramJson(s.deliver_to_ack)},
          {"commits_done", CommitterJson(shb.committer())},
          {"status", shb.status().ok() ? "ok" : shb.status().ToString()}};
}

// Splits "verb rest": the rest is a subscription name, which may hold spaces.
std::pair<std::string, std::string> Verb(const std::string& request) {
  std::pair<std::string, std::string> parts = absl::StrSplit(request, absl::MaxSplits(' ', 1));
  return parts;
}

void AddCommitterMetrics(const std::string& node, const GroupCommitter& committer,
                         MetricsText* out) {
  const GroupCommitter::Stats s = committer.stats();
  out->Counter(absl::StrCat("gryph_", node, "_commits_total"),
               "group commits (storage transactions)", static_cast<double>(s.groups));
  out->Counter(absl::StrCat("gryph_", node, "_committed_records_total"), "records in those commits",
               static_cast<double>(s.records));
  out->Histogram(absl::StrCat("gryph_", node, "_commit_seconds"),
                 "one group commit, with its fsync", s.commit_time);
}

}  // namespace

std::string AnswerShb(SubscriberHostingBroker& shb, const ZmqChannel& channel,
                      const std::string& request) {
  const auto [verb, name] = Verb(request);
  if (verb == "stats") {
    Json j = ShbStats(shb);
    j["channel"] = ChannelJson(channel);
    return j.dump();
  }
  if (verb == "subscriptions") {
    Json all = Json::array();
    for (const SubscriptionStatus& s : shb.Subscriptions()) all.push_back(ToJson(s));
    return all.dump();
  }
  if (verb == "subscription" && !name.empty()) {
    absl::StatusOr<SubscriptionStatus> s = shb.FindSubscription(name);
    if (!s.ok()) return Error(s.status().message());
    Json j = ToJson(*s);
    for (Json& at : j["pubends"]) {
      absl::StatusOr<uint64_t> backlog =
          shb.BacklogEvents(name, PubendId{at["pubend"].get<uint32_t>()});
      at["backlog_events"] = backlog.ok() ? Json(*backlog) : Json(backlog.status().ToString());
    }
    return j.dump();
  }
  if (verb == "delete" && !name.empty()) {
    if (absl::Status st = shb.DeleteSubscription(name); !st.ok()) return Error(st.message());
    return Json{{"deleted", name}}.dump();
  }
  if (verb == "help") return Json{{"commands", kShbCommands}}.dump();
  return Error(absl::StrCat("unknown command '", request, "'; commands: ", kShbCommands));
}

std::string AnswerPhb(PublisherHostingBroker& phb, const ZmqChannel& channel,
                      const std::string& request) {
  if (request == "stats") {
    Json pubends = Json::array();
    for (PubendId p : phb.pubend_ids()) {
      const Pubend* pubend = phb.pubend(p);
      pubends.push_back({{"pubend", p.value},
                         {"committed_tick", pubend->committed_tick()},
                         {"l_prefix", pubend->l_prefix()},
                         {"released_min", pubend->released_min()},
                         {"delivered_min", pubend->delivered_min()},
                         {"damaged_events", pubend->damaged_events()},
                         {"nacks_answered", pubend->nacks_answered()},
                         {"nack_events_sent", pubend->nack_events_sent()},
                         {"status", pubend->status().ok() ? "ok" : pubend->status().ToString()}});
    }
    const PublisherHostingBroker::Stats stats = phb.stats();
    return Json{{"publishes", stats.publishes},
                {"publishes_failed", stats.failed},
                {"publish_to_durable", HistogramJson(stats.publish_to_durable)},
                {"commits_done", CommitterJson(phb.committer())},
                {"pubends", std::move(pubends)},
                {"channel", ChannelJson(channel)}}
        .dump();
  }
  if (request == "help") return Json{{"commands", kOtherCommands}}.dump();
  return Error(absl::StrCat("unknown command '", request, "'; commands: ", kOtherCommands));
}

std::string AnswerIb(const IntermediateBroker& ib, const ZmqChannel& channel,
                     const std::string& request) {
  if (request == "stats") {
    const IntermediateBroker::Stats& s = ib.stats();
    return Json{{"knowledge_received", s.knowledge_received},
                {"knowledge_sent", s.knowledge_sent},
                {"nacks_received", s.nacks_received},
                {"nacks_sent", s.nacks_sent},
                {"ticks_answered_from_cache", s.ticks_answered_from_cache},
                {"events_filtered", s.events_filtered},
                {"releases_sent", s.releases_sent},
                {"channel", ChannelJson(channel)}}
        .dump();
  }
  if (request == "help") return Json{{"commands", kOtherCommands}}.dump();
  return Error(absl::StrCat("unknown command '", request, "'; commands: ", kOtherCommands));
}

void AddShbMetrics(SubscriberHostingBroker& shb, MetricsText* out) {
  const SubscriberHostingBroker::Stats& s = shb.stats();
  out->Gauge("gryph_shb_up", "1 while the SHB serves, 0 once a storage error stopped it",
             shb.status().ok() ? 1 : 0);
  out->Gauge("gryph_shb_waiting_for_room",
             "1 while a full store holds the constreams still (catchups and acks go on)",
             shb.waiting_for_room() ? 1 : 0);
  out->Counter("gryph_shb_full_store_reopens_total",
               "times a commit found the store full and the SHB read its state again",
               static_cast<double>(s.full_store_reopens));
  out->Gauge("gryph_shb_subscriptions", "durable subscriptions hosted",
             static_cast<double>(shb.subscription_count()));
  out->Gauge("gryph_shb_catching_up", "catchup streams running",
             static_cast<double>(shb.catching_up()));
  out->Counter("gryph_shb_events_delivered_total", "Event messages sent to subscribers",
               static_cast<double>(s.events_delivered));
  out->Counter("gryph_shb_gaps_delivered_total", "Gap messages sent to subscribers",
               static_cast<double>(s.gaps_delivered));
  out->Counter("gryph_shb_nacks_sent_total", "nacks sent upstream",
               static_cast<double>(s.nacks_sent));
  out->Counter("gryph_shb_demotions_total", "slow subscribers moved from the constream to catchup",
               static_cast<double>(s.demotions));
  out->Counter("gryph_shb_subscriptions_expired_total", "subscriptions deleted by expiry",
               static_cast<double>(s.subscriptions_expired));
  out->Histogram("gryph_shb_deliver_to_ack_seconds",
                 "a send of Events to a session until the ack that covers it", s.deliver_to_ack);
  AddCommitterMetrics("shb", shb.committer(), out);
  for (const SubscriptionStatus& sub : shb.Subscriptions()) {
    out->Gauge("gryph_subscription_connected", "1 while the subscriber has a session",
               sub.state == SubscriptionStatus::State::kDisconnected ? 0 : 1,
               {{"subscription", sub.name}});
    for (const SubscriptionStatus::AtPubend& at : sub.pubends) {
      const MetricsText::Labels labels = {{"subscription", sub.name},
                                          {"pubend", absl::StrCat(at.pubend.value)}};
      out->Gauge("gryph_subscription_backlog_ticks",
                 "latestDelivered(p) - released(s,p): the span not acknowledged (1 tick = 1 us)",
                 static_cast<double>(at.backlog_ticks), labels);
      out->Gauge("gryph_subscription_unacked_events",
                 "Event messages of the live session not acknowledged",
                 static_cast<double>(at.unacked_events), labels);
      out->Gauge("gryph_subscription_catching_up", "1 while fed from the PFS",
                 at.catching_up ? 1 : 0, labels);
    }
  }
}

void AddPhbMetrics(PublisherHostingBroker& phb, MetricsText* out) {
  const PublisherHostingBroker::Stats stats = phb.stats();
  out->Counter("gryph_phb_publishes_total", "publishes answered",
               static_cast<double>(stats.publishes));
  out->Counter("gryph_phb_publishes_failed_total", "publishes answered with an error",
               static_cast<double>(stats.failed));
  out->Histogram("gryph_phb_publish_to_durable_seconds", "a publish until its event is durable",
                 stats.publish_to_durable);
  AddCommitterMetrics("phb", phb.committer(), out);
  for (PubendId p : phb.pubend_ids()) {
    const Pubend* pubend = phb.pubend(p);
    const MetricsText::Labels labels = {{"pubend", absl::StrCat(p.value)}};
    out->Gauge("gryph_pubend_up", "1 while the pubend serves", pubend->status().ok() ? 1 : 0,
               labels);
    out->Gauge("gryph_pubend_committed_tick", "T(p): every tick at or below is durable",
               static_cast<double>(pubend->committed_tick()), labels);
    out->Gauge("gryph_pubend_l_prefix", "every tick at or below is released (L)",
               static_cast<double>(pubend->l_prefix()), labels);
    out->Gauge("gryph_pubend_retained_ticks", "committed_tick - l_prefix: the log retained",
               static_cast<double>(pubend->committed_tick() - pubend->l_prefix()), labels);
    out->Counter("gryph_pubend_damaged_events_total", "log rows found damaged since open",
                 static_cast<double>(pubend->damaged_events()), labels);
    out->Counter("gryph_pubend_nacks_answered_total", "nacks answered",
                 static_cast<double>(pubend->nacks_answered()), labels);
    out->Counter("gryph_pubend_nack_events_sent_total", "events sent in nack answers",
                 static_cast<double>(pubend->nack_events_sent()), labels);
  }
}

void AddIbMetrics(const IntermediateBroker& ib, MetricsText* out) {
  const IntermediateBroker::Stats& s = ib.stats();
  out->Counter("gryph_ib_knowledge_received_total", "knowledge messages from upstream",
               static_cast<double>(s.knowledge_received));
  out->Counter("gryph_ib_knowledge_sent_total", "knowledge messages sent downstream",
               static_cast<double>(s.knowledge_sent));
  out->Counter("gryph_ib_nacks_received_total", "nacks from downstream",
               static_cast<double>(s.nacks_received));
  out->Counter("gryph_ib_ticks_answered_from_cache_total", "nacked ticks answered from the cache",
               static_cast<double>(s.ticks_answered_from_cache));
}

void AddChannelMetrics(const ZmqChannel& channel, MetricsText* out) {
  const ZmqChannel::Stats s = channel.stats();
  out->Counter("gryph_channel_sent_total", "messages handed to ZeroMQ",
               static_cast<double>(s.sent));
  out->Counter("gryph_channel_received_total", "messages received and decoded",
               static_cast<double>(s.received));
  out->Counter("gryph_channel_dropped_total", "sends dropped: the peer's queue was full",
               static_cast<double>(s.dropped_full));
  out->Counter("gryph_channel_unreachable_total", "sends to a peer that is not connected",
               static_cast<double>(s.unreachable));
  out->Counter("gryph_channel_rejected_frames_total", "frames that did not decode or were too big",
               static_cast<double>(s.malformed + s.oversized));
  out->Counter("gryph_channel_corrupted_frames_total",
               "frames whose checksum did not match: damaged on the way",
               static_cast<double>(s.corrupted));
  out->Counter("gryph_channel_denied_total", "CURVE handshakes refused and impersonations",
               static_cast<double>(s.denied + s.impersonations));
}

}  // namespace gryph::programs
