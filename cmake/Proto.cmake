# Generates protobuf-c sources from the project's own .proto files at build time.

# gpuprof_protoc_c(<out_var> <proto>...): adds the generated .pb-c.c files to <out_var> and
# puts their headers under ${CMAKE_BINARY_DIR}/proto (include them as "proto/<name>.pb-c.h").
function(gpuprof_protoc_c out_var)
  set(outdir ${CMAKE_BINARY_DIR}/proto)
  file(MAKE_DIRECTORY ${outdir})
  set(srcs)
  foreach(proto ${ARGN})
    get_filename_component(abs ${proto} ABSOLUTE)
    get_filename_component(dir ${abs} DIRECTORY)
    get_filename_component(name ${abs} NAME_WE)
    add_custom_command(
      OUTPUT ${outdir}/${name}.pb-c.c ${outdir}/${name}.pb-c.h
      COMMAND ${PROTOC_C} --c_out=${outdir} --proto_path=${dir} ${abs}
      DEPENDS ${abs}
      COMMENT "protoc-c ${name}.proto")
    list(APPEND srcs ${outdir}/${name}.pb-c.c)
  endforeach()
  set(${out_var} ${srcs} PARENT_SCOPE)
endfunction()
