// A shared library named like a plugin but exporting no descriptor.
extern "C" int not_a_titan_plugin() { return 42; }
