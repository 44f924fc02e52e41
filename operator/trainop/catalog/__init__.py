"""Framework x NGC release x CUDA x driver x GPU architecture facts, image choice and node compatibility."""
