// A job of N ranks simulated in one process for `titan plan`'s dry run:
// every rank is a thread, every process group an in-process rendezvous.
// Each collective waits for all members of its group, as a real backend
// does, and checks that they issued the same op with matching shapes,
// dtypes and reductions; a send waits for its receive, which must expect
// the same shape. The first mismatch (or a wait no rank can ever end: a
// deadlock) stops every rank with one message naming the group, the ranks,
// their call sites and the first differing collective. CPU tensors (host
// metadata: shapes, counts) are really exchanged; meta tensors only get
// correctly shaped results.
//
// Only some ranks may be simulated: each other rank has a representative
// among them that provably behaves as it does (dry_run.cpp), and stands in
// for it in every group both belong to. With `take_turns`, one rank thread
// runs at a time (the others wait in a collective or for their turn), for
// plugins that keep process-wide state and so cannot run side by side.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "titan/comm.hpp"
#include "titan/error.hpp"

namespace titan {

// Thrown in every rank once the simulated job has stopped (the message is
// the first failure's).
class SimulationStopped : public Error {
 public:
  using Error::Error;
};

class SimulatedWorld {
 public:
  // representative[r]: the simulated rank that stands for rank r (r itself
  // when r is simulated); empty: every rank is simulated.
  explicit SimulatedWorld(int world_size, std::vector<int> representative = {}, bool take_turns = false);
  ~SimulatedWorld();
  int world_size() const { return world_size_; }

  // The comm of `rank` in the group of `ranks` (every member asks for it
  // with the same name; a name reused for the same ranks is a new group).
  // `events`: where this rank's calls are recorded (as the flight recorder
  // would see them).
  std::unique_ptr<Comm> new_group(const std::string& name, const std::vector<int>& ranks, int rank,
                                  std::vector<CollectiveEvent>* events);

  // Every simulated rank is counted started before any thread runs, so
  // that a wait no running rank can end is found; each thread then enters
  // (takes its turn) and finishes.
  void rank_started();
  void enter();
  void rank_finished();
  // Stops every rank (the first reason wins); they throw SimulationStopped.
  void stop(const std::string& reason);
  std::string failure() const;
  // After every rank finished: sends nobody received.
  std::vector<std::string> unreceived_sends() const;

  struct State;  // the rounds, mailboxes and waits (simulated_world.cpp)

 private:
  const int world_size_;
  std::vector<int> representative_;
  std::unique_ptr<State> state_;
};

}  // namespace titan
