# Adds every immediate subdirectory of the current source dir that has a CMakeLists.txt,
# so a new library or test folder joins the build without editing its parent.
# -DMCP_SKIP_DIRS="a;tests/unit/b" leaves out folders with those names (at any level)
# or those paths, for
# building one part of the tree while another is being written.
set(MCP_SKIP_DIRS "" CACHE STRING "Folder names to leave out of the build")

function(mcp_add_subdirectories)
  file(GLOB children LIST_DIRECTORIES true RELATIVE ${CMAKE_CURRENT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR}/*)
  list(SORT children)
  foreach(child ${children})
    file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR}/${child})
    if(rel IN_LIST MCP_SKIP_DIRS)
      continue()
    endif()
    if(IS_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/${child} AND EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/${child}/CMakeLists.txt
       AND NOT child IN_LIST MCP_SKIP_DIRS)
      add_subdirectory(${child})
    endif()
  endforeach()
endfunction()
