"""The deployment contract: schema, YAML I/O, validation rules and diagnostics."""

from ascend_pd.deploy.diagnostics import Diagnostic, has_errors
from ascend_pd.deploy.io import (LoadedDeployment, dump_deployment, load_deployment, parse_deployment, revision_of,
                                 write_deployment)
from ascend_pd.deploy.schema import (SLO, Connector, Deployment, DevicePlacement, Instance, LengthDistribution,
                                     Metadata, ModelRef, Parallel, Proxy, VllmArgs, Workload)
from ascend_pd.deploy.validate import validate, validate_file

__all__ = ["Connector", "Deployment", "DevicePlacement", "Diagnostic", "Instance", "LengthDistribution",
           "LoadedDeployment", "Metadata", "ModelRef", "Parallel", "Proxy", "SLO", "VllmArgs", "Workload",
           "dump_deployment", "has_errors", "load_deployment", "parse_deployment", "revision_of", "validate",
           "validate_file",
           "write_deployment"]
