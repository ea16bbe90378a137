#include "common/text_file.h"

#include <fstream>
#include <sstream>

#include "common/error.h"

namespace mcp {

std::string read_text_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw usage_error(std::string("cannot read ") + what + " '" + path + "'");
  std::ostringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

}  // namespace mcp
