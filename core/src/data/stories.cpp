// The built-in "stories" corpus: short English stories generated from a
// seed and an index (characters, places, objects, small plots, dialogue), so
// runs and tests need no download. A few hundred words, many sentence forms.
#include <array>
#include <map>

#include "sources.hpp"
#include "titan/error.hpp"

namespace titan {

namespace {

// SplitMix64: tiny, fast, and the same on every platform (std:: distributions are not).
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  uint64_t next() { return mix(state_ += 0x9E3779B97F4A7C15ull); }
  size_t below(size_t n) { return static_cast<size_t>(next() % n); }
  bool chance(int percent) { return below(100) < static_cast<size_t>(percent); }
  template <typename T, size_t N>
  const T& pick(const std::array<T, N>& items) {
    return items[below(N)];
  }

 private:
  uint64_t state_;
};

using Words = std::array<const char*, 16>;

const std::array<const char*, 20> kGirlNames = {"Lily", "Mia",  "Emma", "Sara", "Anna", "Lucy",  "Zoe",
                                                "Ella", "Rosa", "Nina", "Maya", "Ruby", "Daisy", "Grace",
                                                "Ivy",  "Hana", "Amy",  "Jade", "Nora", "Tess"};
const std::array<const char*, 20> kBoyNames = {"Tom",  "Ben",  "Max",  "Sam",  "Leo",  "Jack",  "Finn",
                                               "Omar", "Noah", "Theo", "Kai",  "Milo", "Oscar", "Hugo",
                                               "Eli",  "Ravi", "Dan",  "Luke", "Pete", "Otto"};
const std::array<const char*, 16> kAnimals = {"cat",  "dog",    "rabbit",   "fox", "bear", "mouse", "duck",   "owl",
                                              "frog", "turtle", "squirrel", "pig", "lamb", "robot", "dragon", "puppy"};
const Words kTraits = {"little", "kind",     "brave", "curious", "shy",   "happy",   "clever",   "funny",
                       "gentle", "friendly", "small", "silly",   "quiet", "careful", "cheerful", "busy"};
const std::array<const char*, 20> kPlaces = {"the park",  "the forest", "the beach",      "the garden",   "the farm",
                                             "the river", "the hill",   "the town",       "the school",   "the market",
                                             "the lake",  "the meadow", "the village",    "the library",  "the zoo",
                                             "the woods", "the pond",   "the playground", "the old barn", "the field"};
const Words kColors = {"red",   "blue",  "green",  "yellow", "pink",  "purple",  "orange",  "white",
                       "black", "brown", "golden", "silver", "shiny", "striped", "spotted", "soft"};
const std::array<const char*, 24> kObjects = {"ball",  "kite",   "hat",    "book",    "box",        "key",
                                              "shell", "cup",    "drum",   "boat",    "bell",       "scarf",
                                              "map",   "lamp",   "stone",  "feather", "ring",       "blanket",
                                              "bike",  "basket", "crayon", "whistle", "teddy bear", "marble"};
const Words kActivities = {"play in the grass",      "read books",        "sing songs",
                           "draw pictures",          "climb trees",       "look at the stars",
                           "build towers of blocks", "bake cookies",      "dance in the rain",
                           "collect shells",         "count the clouds",  "ride a bike",
                           "plant flowers",          "splash in puddles", "tell jokes",
                           "make paper boats"};
const Words kTimes = {"One sunny morning", "One rainy afternoon", "One cold winter day", "One warm summer evening",
                      "One day",           "The next morning",    "Later that day",      "After lunch",
                      "Before dinner",     "One windy day",       "One quiet night",     "On a bright spring day",
                      "One Saturday",      "Early one morning",   "One foggy morning",   "One autumn day"};
const std::array<const char*, 12> kHidingSpots = {"under a big bush",  "behind a tree",    "in the tall grass",
                                                  "next to the fence", "under the bench",  "inside an old box",
                                                  "near the water",    "on top of a rock", "under some leaves",
                                                  "behind the door",   "in a small hole",  "between two stones"};
const std::array<const char*, 8> kFears = {"the dark",       "the big dog",      "the loud thunder",
                                           "the deep water", "the tall slide",   "the buzzing bees",
                                           "the old bridge", "the strange noise"};
const std::array<const char*, 8> kBuilds = {"a sandcastle", "a treehouse",   "a snowman", "a paper kite",
                                            "a tower",      "a little boat", "a cake",    "a birdhouse"};
const std::array<const char*, 8> kCritters = {"a baby bird",  "a lost kitten",    "a little frog", "a tiny snail",
                                              "a young duck", "a small hedgehog", "a lost puppy",  "a ladybug"};
const std::array<const char*, 8> kGames = {"hide and seek", "tag",       "a race to the big tree", "catch",
                                           "jump rope",     "hopscotch", "a game of marbles",      "follow the leader"};
const std::array<const char*, 8> kFoods = {"an apple",    "a sandwich", "a cookie",      "a piece of cake",
                                           "some grapes", "a banana",   "a warm muffin", "some cherries"};
const std::array<const char*, 10> kMorals = {"friends help each other",
                                             "sharing makes everyone happy",
                                             "it is good to be brave",
                                             "you should never give up",
                                             "kindness is the best gift",
                                             "it is fun to try new things",
                                             "being careful keeps you safe",
                                             "playing together is better than winning",
                                             "a friend can make a sad day bright",
                                             "small things can matter a lot"};

std::string a_an(const std::string& word) {
  char c = word.empty() ? 'x' : word[0];
  bool vowel = c == 'a' || c == 'e' || c == 'i' || c == 'o' || c == 'u';
  return (vowel ? "an " : "a ") + word;
}

std::string capitalized(std::string s) {
  if (!s.empty() && s[0] >= 'a' && s[0] <= 'z') s[0] = static_cast<char>(s[0] - 'a' + 'A');
  return s;
}

struct Character {
  std::string name, kind, trait;
  bool female;
};

Character make_character(Rng& rng, const std::string& avoid_name) {
  Character c;
  for (;;) {
    c.female = rng.chance(50);
    c.name = c.female ? rng.pick(kGirlNames) : rng.pick(kBoyNames);
    if (c.name != avoid_name) break;
  }
  c.kind = rng.chance(45) ? (c.female ? "girl" : "boy") : rng.pick(kAnimals);
  c.trait = rng.pick(kTraits);
  return c;
}

// Expands templates like "{P} gave {his} {obj} to {F}." from one variable table.
class StoryWriter {
 public:
  explicit StoryWriter(Rng& rng) : rng_(rng) {}

  void set_character(const std::string& prefix, const Character& c) {
    vars_[prefix] = c.name;
    vars_[prefix + "kind"] = c.kind;
    vars_[prefix + "trait"] = c.trait;
    vars_[prefix + "a_trait_kind"] = a_an(c.trait + " " + c.kind);
    vars_[prefix + "he"] = c.female ? "she" : "he";
    vars_[prefix + "He"] = c.female ? "She" : "He";
    vars_[prefix + "him"] = c.female ? "her" : "him";
    vars_[prefix + "his"] = c.female ? "her" : "his";
    vars_[prefix + "His"] = c.female ? "Her" : "His";
  }
  void set(const std::string& key, const std::string& value) { vars_[key] = value; }

  // Picks one template from `options` and appends it as a sentence.
  template <size_t N>
  void say(const std::array<const char*, N>& options) {
    sentence(options[rng_.below(N)]);
  }
  void sentence(const std::string& tmpl) {
    if (!text_.empty() && text_.back() != '\n') text_.push_back(' ');
    text_ += capitalized(expand(tmpl));
  }
  void paragraph() {
    if (!text_.empty() && text_.back() != '\n') text_.push_back('\n');
  }
  const std::string& text() const { return text_; }

 private:
  std::string expand(const std::string& tmpl) const {
    std::string out;
    for (size_t i = 0; i < tmpl.size(); ++i) {
      if (tmpl[i] != '{') {
        out.push_back(tmpl[i]);
        continue;
      }
      size_t close = tmpl.find('}', i);
      std::string key = tmpl.substr(i + 1, close - i - 1);
      auto it = vars_.find(key);
      if (it == vars_.end()) throw Error("stories generator: template variable {" + key + "} is not set");
      out += it->second;
      i = close;
    }
    return out;
  }

  Rng& rng_;
  std::map<std::string, std::string> vars_;
  std::string text_;
};

using Templates2 = std::array<const char*, 2>;
using Templates3 = std::array<const char*, 3>;
using Templates4 = std::array<const char*, 4>;

void introduce(StoryWriter& w) {
  w.say(Templates4{"Once upon a time, there was {Pa_trait_kind} named {P}.",
                   "There once lived {Pa_trait_kind} called {P}.", "{P} was {Pa_trait_kind} who lived near {place}.",
                   "Once upon a time, in a small village, lived {Pa_trait_kind} named {P}."});
  w.say(Templates4{"{P} liked to {activity} every day.", "More than anything, {P} loved to {activity}.",
                   "Every morning, {Phe} would {activity}.", "{PHe} liked to {activity} with {Phis} family."});
  w.say(Templates4{"{PHe} had {a_obj} that {Phe} loved very much.", "{PHis} favorite thing was {a_obj}.",
                   "{PHe} always carried {a_obj} with {Phim}.", "{P} kept {a_obj} in {Phis} room."});
}

void meet_friend(StoryWriter& w) {
  w.say(Templates4{"{time}, {P} went to {place}.", "{time}, {P} decided to walk to {place}.",
                   "{time}, {P} and {Phis} mom went to {place}.", "{time}, {P} ran all the way to {place}."});
  w.say(Templates4{"There {Phe} met {Fa_trait_kind} named {F}.", "At {place}, {Phe} saw {Fa_trait_kind} called {F}.",
                   "On the way, {Phe} met {F}, {Fa_trait_kind}.", "{F}, {Fa_trait_kind}, was already there."});
  w.say(Templates4{"\"Hello, {F}!\" said {P}. \"Do you want to play with me?\"",
                   "\"Hi! My name is {P},\" said the {Pkind}. \"What is your name?\" \"I am {F},\" said the {Fkind}.",
                   "\"Good morning, {F},\" said {P} with a smile.",
                   "{F} waved and said, \"Hello, {P}! Come and play!\""});
  w.say(Templates3{"Soon they were good friends.", "{F} smiled, and they played together all morning.",
                   "They laughed and played until the sun was high."});
}

void episode_lost_object(StoryWriter& w, Rng& rng) {
  w.set("spot", rng.pick(kHidingSpots));
  w.say(Templates3{"But then {P} could not find {Phis} {obj}.", "Suddenly, {P} saw that {Phis} {obj} was gone.",
                   "After a while, {P} looked for {Phis} {obj}, but it was not there."});
  w.say(Templates3{"{PHe} felt very sad.", "{PHe} began to cry.", "{PHe} was worried and did not know what to do."});
  w.say(Templates3{"\"What is wrong?\" asked {F}. \"I lost my {obj},\" said {P}.",
                   "\"Why are you sad?\" asked {F}. \"My {obj} is gone,\" {P} said.",
                   "{F} saw that {P} was sad. \"Do not worry,\" said {F}. \"I will help you look.\""});
  w.say(Templates3{"They looked everywhere.", "They searched high and low.", "They looked {spot} and all around."});
  w.set("spot", rng.pick(kHidingSpots));
  w.say(Templates3{"At last, {F} found the {obj} {spot}.", "Then {F} shouted, \"Look! It is {spot}!\"",
                   "Finally, {P} saw something {color}. It was the {obj}, {spot}!"});
  w.say(Templates3{"\"Thank you, {F}!\" said {P}. {PHe} hugged {Phis} friend.",
                   "{P} was so happy. \"You are a good friend,\" {Phe} said.",
                   "{P} smiled and thanked {F} again and again."});
}

void episode_sharing(StoryWriter& w, Rng& rng) {
  w.set("food", rng.pick(kFoods));
  w.say(Templates3{"Soon they were hungry.", "After playing, their tummies began to rumble.",
                   "When it was time for a snack, {P} opened {Phis} bag."});
  w.say(Templates3{"{P} had {food}, but {F} had nothing to eat.", "{P} found {food} in {Phis} bag.",
                   "{P} had {food}. {F} looked at it and felt sad."});
  w.say(Templates3{"{P} thought for a moment. Then {Phe} gave half to {F}.",
                   "\"Let us share,\" said {P}, and {Phe} broke it in two.",
                   "{P} did not want {Phis} friend to be sad, so {Phe} shared {food} with {F}."});
  w.say(Templates3{"{F} was very happy. \"Thank you!\" {Fhe} said.", "They ate together and smiled.",
                   "It tasted even better when they shared it."});
}

void episode_fear(StoryWriter& w, Rng& rng) {
  w.set("fear", rng.pick(kFears));
  w.say(Templates3{"Then they came to {fear}.", "Soon they heard about {fear}.", "On the way home, they saw {fear}."});
  w.say(Templates3{"{P} was scared of {fear}.", "{P} stopped. {PHe} was afraid.",
                   "{P} held {F} tight. \"I am scared,\" {Phe} said."});
  w.say(Templates3{"\"It is okay,\" said {F}. \"I am here with you.\"",
                   "{F} took {Phis} hand. \"We can do it together,\" {Fhe} said.",
                   "\"Be brave,\" said {F}. \"Take a deep breath.\""});
  w.say(Templates3{"{P} took a deep breath and went on.", "Step by step, {P} was not scared anymore.",
                   "{P} felt brave, and soon the fear was gone."});
  w.say(Templates2{"\"I did it!\" said {P}. {F} clapped {Fhis} hands.", "{P} was proud of {Phim}self."});
}

void episode_building(StoryWriter& w, Rng& rng) {
  w.set("build", rng.pick(kBuilds));
  w.say(Templates3{"\"Let us make {build},\" said {F}.", "{P} had an idea. \"We can build {build}!\"",
                   "They decided to make {build} together."});
  w.say(Templates3{"They worked hard all afternoon.", "{P} brought sticks and {F} brought string.",
                   "They worked and worked until it was done."});
  w.say(Templates3{"But then a strong wind came, and it fell down.", "Oh no! It broke into pieces.",
                   "But it was crooked, and it fell over."});
  w.say(Templates3{"{P} was sad, but {F} said, \"Let us try again.\"", "They did not give up.",
                   "\"We can fix it,\" said {P}."});
  w.say(Templates3{"The second time, it was even better.", "This time it stood tall and strong.",
                   "At last, {build} was finished, and it was beautiful."});
}

void episode_rescue(StoryWriter& w, Rng& rng) {
  w.set("critter", rng.pick(kCritters));
  w.say(Templates3{"Then they heard a small sound.", "Suddenly, {F} stopped. \"Listen!\" {Fhe} said.",
                   "Near {place}, they found something moving."});
  w.say(Templates3{"It was {critter}. It looked lost and scared.", "It was {critter}, all alone.",
                   "{critter} was stuck and could not get out."});
  w.say(Templates3{"\"We have to help it,\" said {P}.", "\"Poor thing,\" said {F}. \"Let us help.\"",
                   "{P} picked it up very gently."});
  w.say(Templates3{"They looked for its home and found its mother.", "They carried it back to its family.",
                   "They gave it water and kept it warm until it felt better."});
  w.say(Templates2{"The little animal was safe, and they felt proud.", "It was happy again, and so were they."});
}

void episode_game(StoryWriter& w, Rng& rng) {
  w.set("game", rng.pick(kGames));
  w.say(Templates3{"Then they played {game}.", "\"Let us play {game}!\" said {F}.",
                   "Next, {P} and {F} played {game} with the other children."});
  w.say(Templates3{"{F} was very fast.", "{P} ran as fast as {Phe} could.", "They laughed and shouted."});
  w.say(Templates3{"But {F} tripped and fell down.", "Then {P} slipped and hurt {Phis} knee.",
                   "Then {F} bumped into a tree."});
  w.say(Templates3{"The game stopped, and everyone came to help.", "{P} helped {Phis} friend get up.",
                   "\"Are you okay?\" they asked."});
  w.say(Templates2{"Soon they were laughing again. Winning did not matter.",
                   "They forgot about the game and sat together in the shade."});
}

void episode_weather(StoryWriter& w, Rng&) {
  w.say(Templates3{"Then dark clouds came, and it began to rain.", "Suddenly, the sky turned gray.",
                   "All at once, big drops of rain began to fall."});
  w.say(Templates3{"They ran to hide under a big tree.", "They found a dry place in the old barn.",
                   "They hid under a red umbrella."});
  w.say(Templates3{"While they waited, {F} told a funny story.", "They listened to the rain and sang a song.",
                   "{P} and {F} counted the raindrops."});
  w.say(Templates3{"Soon the rain stopped and the sun came out.", "After a while, they saw a big rainbow.",
                   "When the rain was over, the grass smelled fresh and sweet."});
}

void conclude(StoryWriter& w) {
  w.say(Templates4{"When the sun went down, {P} went home.", "At the end of the day, they said goodbye.",
                   "That evening, {P} told {Phis} mom all about {Phis} day.", "Then it was time to go home."});
  w.say(Templates4{"From that day on, {P} and {F} were best friends.", "{P} learned that {moral}.",
                   "That night, {P} went to sleep with a big smile.", "{P} knew that {moral}."});
  w.say(Templates3{"The end.", "And they played together every day after that.", "{P} could not wait for tomorrow."});
}

}  // namespace

std::string generate_story(uint64_t seed, int64_t index) {
  // Hash (seed, index): SplitMix64 states that differ by a multiple of its
  // increment would give neighbouring stories shifted copies of one stream.
  Rng rng(Rng::mix(Rng::mix(seed + 0x632BE59BD9B4E019ull) ^ static_cast<uint64_t>(index)));
  StoryWriter w(rng);
  Character hero = make_character(rng, "");
  Character friend_ = make_character(rng, hero.name);
  w.set_character("P", hero);
  w.set_character("F", friend_);
  w.set("place", rng.pick(kPlaces));
  // One draw a statement: the operands of `+` are evaluated in an order the
  // compiler picks (GCC right to left here, clang left to right), which made
  // the corpus differ between builds. This is the order GCC's builds drew.
  const std::string object_name = rng.pick(kObjects);
  const std::string object = std::string(rng.pick(kColors)) + " " + object_name;
  w.set("obj", object);
  w.set("a_obj", a_an(object));
  w.set("color", rng.pick(kColors));
  w.set("activity", rng.pick(kActivities));
  w.set("time", rng.pick(kTimes));
  w.set("moral", rng.pick(kMorals));

  introduce(w);
  w.paragraph();
  meet_friend(w);
  using Episode = void (*)(StoryWriter&, Rng&);
  const std::array<Episode, 7> episodes = {episode_lost_object, episode_sharing, episode_fear,   episode_building,
                                           episode_rescue,      episode_game,    episode_weather};
  size_t count = 1 + rng.below(3);
  if (rng.chance(15)) count += 2;
  size_t first = rng.below(episodes.size());
  size_t stride = 1 + rng.below(episodes.size() - 1);  // coprime with 7: no episode twice in a row of 7
  for (size_t i = 0; i < count; ++i) {
    w.paragraph();
    if (i > 0) {
      w.set("time", rng.pick(kTimes));
      w.say(Templates3{"{time}, they met again.", "After that, they kept playing.", "{time}, they went out again."});
    }
    episodes[(first + i * stride) % episodes.size()](w, rng);
  }
  w.paragraph();
  conclude(w);
  return w.text();
}

namespace data {

namespace {

class StoriesSource final : public DocumentSource {
 public:
  StoriesSource(uint64_t seed, int64_t documents) : seed_(seed), documents_(documents) {}
  std::string describe() const override {
    return "generated stories (seed " + std::to_string(seed_) + ", " + std::to_string(documents_) +
           " documents per epoch)";
  }
  void rewind() override { next_ = 0; }
  std::optional<std::string> next_text() override {
    if (next_ >= documents_) return std::nullopt;
    return generate_story(seed_, next_++);
  }

 private:
  uint64_t seed_;
  int64_t documents_;
  int64_t next_ = 0;
};

}  // namespace

std::unique_ptr<DocumentSource> make_stories_source(uint64_t seed, int64_t documents_per_epoch) {
  return std::make_unique<StoriesSource>(seed, documents_per_epoch);
}

}  // namespace data

}  // namespace titan
