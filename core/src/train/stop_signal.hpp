// Turns SIGINT/SIGTERM into a flag the training loop checks between steps.
#pragma once

namespace titan {

class StopSignal {
 public:
  StopSignal();   // installs the handlers
  ~StopSignal();  // restores the previous ones
  bool requested() const;
  int signal_number() const;
};

}  // namespace titan
